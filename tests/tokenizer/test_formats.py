"""Files: GPT-2's format, packlm's saved directory (atomic, verified on load), and the
Hugging Face tokenizer.json export."""

from __future__ import annotations

import json

import pytest

from packlm.tokenizer import Tokenizer
from packlm.tokenizer.formats import BYTE_CHARS, from_unicode, to_unicode

EOT = "<|endoftext|>"


def test_byte_to_unicode_map():
    assert len(set(BYTE_CHARS)) == 256
    assert all(BYTE_CHARS[b] == chr(b) for b in b"!az~\xa1\xae\xff")
    assert BYTE_CHARS[ord(" ")] == "Ġ" and BYTE_CHARS[ord("\n")] == "Ċ"
    every = bytes(range(256))
    assert from_unicode(to_unicode(every)) == every
    assert all(c.isprintable() and not c.isspace() for c in BYTE_CHARS)
    assert from_unicode("a b") is None  # a plain space is not in the map


def test_save_load_roundtrip(tmp_path, small_tokenizer, stdlib_docs):
    small_tokenizer.save(tmp_path / "tok")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == [
        "merges.txt",
        "tokenizer_config.json",
        "vocab.json",
    ]  # no temporary files left
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.digest() == small_tokenizer.digest()
    assert loaded.special_token_ids == small_tokenizer.special_token_ids
    text = stdlib_docs[7][:10_000] + EOT + "€"
    assert loaded.encode(text) == small_tokenizer.encode(text)
    small_tokenizer.save(tmp_path / "tok")  # overwriting is fine
    assert Tokenizer.load(tmp_path / "tok").digest() == small_tokenizer.digest()


def _corrupt(directory, name, change):
    path = directory / name
    path.write_bytes(change(path.read_bytes()))


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("vocab.json", lambda b: b[: len(b) // 2], "vocab.json: not valid JSON"),
        ("vocab.json", lambda b: b.replace(b'"a": ', b'"a b": ', 1), "vocab.json: bad entry"),
        ("merges.txt", lambda b: b[: b.rindex(b"\n", 0, len(b) - 1) + 1], "digest"),
        ("merges.txt", lambda b: b[:-3], "merges.txt"),
        ("merges.txt", lambda b: b + b"x y z\n", r"merges.txt:\d+: expected two"),
        ("merges.txt", lambda b: b.replace(b"\n", b"\n\xff", 1), "merges.txt: not valid UTF-8"),
        ("tokenizer_config.json", lambda b: b[:10], "tokenizer_config.json: not valid JSON"),
        (
            "tokenizer_config.json",
            lambda b: b.replace(b"packlm-bpe", b"other"),
            "tokenizer_config.json: not a packlm",
        ),
    ],
)
def test_corrupt_or_truncated_save_fails_naming_the_file(
    tmp_path, small_tokenizer, name, change, message
):
    small_tokenizer.save(tmp_path)
    _corrupt(tmp_path, name, change)
    with pytest.raises(ValueError, match=message):
        Tokenizer.load(tmp_path)


def test_missing_files(tmp_path, small_tokenizer):
    with pytest.raises(FileNotFoundError, match="no saved tokenizer"):
        Tokenizer.load(tmp_path / "absent")
    small_tokenizer.save(tmp_path)
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(FileNotFoundError, match="merges.txt"):
        Tokenizer.load(tmp_path)


def test_from_files_with_and_without_version_line(tmp_path, small_tokenizer):
    small_tokenizer.save(tmp_path)
    merges = (tmp_path / "merges.txt").read_text(encoding="utf-8")
    assert merges.startswith("#version")
    (tmp_path / "plain.txt").write_text(merges.split("\n", 1)[1], encoding="utf-8")
    a = Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt", [EOT, "<|pad|>"])
    b = Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "plain.txt", [EOT, "<|pad|>"])
    assert a.digest() == b.digest() == small_tokenizer.digest()


def test_gpt2_files_layout(gpt2_tokenizer):
    tok = gpt2_tokenizer
    assert tok.vocab_size == 50257 and tok.special_token_ids == {EOT: 50256}
    assert len(tok.merges) == 50000
    assert tok.token_bytes(tok.encode(" the")[0]) == b" the"


@pytest.mark.parametrize("which", ["small", "gpt2"])
def test_hf_export_gives_same_ids(tmp_path, request, stdlib_docs, which):
    tokenizers = pytest.importorskip("tokenizers")
    if which == "small":
        tok = request.getfixturevalue("small_tokenizer")
    else:
        tok = request.getfixturevalue("gpt2_tokenizer")
    tok.save_hf(tmp_path / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts = [stdlib_docs[2][:20_000], f"a{EOT}b  \n\n  c", "naïve 数据 🙂 don't  x", " "]
    for text in texts:
        ids = tok.encode(text)
        assert hf.encode(text, add_special_tokens=False).ids == ids
        assert hf.decode(ids, skip_special_tokens=False) == text
    assert json.loads((tmp_path / "tokenizer.json").read_text("utf-8"))["model"]["type"] == "BPE"


# ---- tiktoken ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["small", "gpt2"])
def test_to_tiktoken_gives_same_ids(request, stdlib_docs, which):
    pytest.importorskip("tiktoken")
    tok = request.getfixturevalue("small_tokenizer" if which == "small" else "gpt2_tokenizer")
    enc = tok.to_tiktoken()
    assert enc.n_vocab == tok.vocab_size
    assert enc.special_tokens_set == set(tok.special_tokens)
    for text in [stdlib_docs[3][:20_000], f"a{EOT}b  \n\n  c", "naïve 数据 🙂 don't  x"]:
        assert enc.encode(text, allowed_special="all") == tok.encode(text)
        assert enc.encode_ordinary(text) == tok.encode_ordinary(text)
        assert enc.decode(tok.encode(text)) == text


def crossing_tokenizer() -> Tokenizer:
    """Merges b+c, a+b, ab+c: BPE of "abc" makes "bc" first, so the token "abc" never comes
    out of merge BPE, and tiktoken (which returns a pre-token that is a token whole) differs."""
    vocab = {i: bytes([i]) for i in range(256)}
    merges = [(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")]
    vocab.update({256: b"bc", 257: b"ab", 258: b"abc"})
    return Tokenizer(vocab, merges)


def test_no_tiktoken_where_it_would_differ(tmp_path):
    pytest.importorskip("tiktoken")
    tok = crossing_tokenizer()
    assert tok.encode("abc") == [97, 256] and tok.engine == "python"
    with pytest.raises(ValueError, match="no tiktoken Encoding gives"):
        tok.to_tiktoken()
    tok.save(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tiktoken_ranks"] is False
    again = Tokenizer.load(tmp_path)
    assert again.encode("abc") == [97, 256] and again.engine == "python"


def test_saved_tokenizer_skips_the_slow_check(tmp_path, gpt2_tokenizer, monkeypatch):
    from packlm.tokenizer import tokenizer as tokenizer_module

    gpt2_tokenizer.save(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tiktoken_ranks"] is True
    calls = []
    real = tokenizer_module.tiktoken_ranks
    monkeypatch.setattr(
        tokenizer_module, "tiktoken_ranks", lambda *a: calls.append(a[-1]) or real(*a)
    )
    loaded = Tokenizer.load(tmp_path)
    text = "Hello, naïve 🙂 world"
    assert loaded.encode(text) == gpt2_tokenizer.encode(text)
    assert calls == [None]  # no reference encoder: the saved, digest-checked verdict is used
    assert Tokenizer(loaded.vocab, loaded.merges, [EOT]).tiktoken_checked is False


def test_fast_self_encoding_check_is_exact():
    """The check that skips most BPE runs agrees with running BPE on every merged token, on
    random merge lists (about half of them have a token that does not encode to itself)."""
    import random

    from packlm.tokenizer.encoder import merges_encode_to_themselves

    outcomes = set()
    for seed in range(1500):
        rng = random.Random(seed)
        vocab = {i: bytes([i]) for i in range(256)}
        tokens, merges = [bytes([97 + i]) for i in range(rng.randint(1, 3))], []
        for _ in range(rng.randint(1, 12)):
            a, b = rng.choice(tokens), rng.choice(tokens)
            if a + b not in tokens and len(a + b) <= 8:
                tokens.append(a + b)
                merges.append((a, b))
                vocab[len(vocab)] = a + b
        tok = Tokenizer(vocab, merges, engine="python")
        reference = tok._python_encoder()
        slow = all(reference.encode_piece(tok.vocab[c]) == [c] for _, _, c in tok._merge_ids)
        fast = merges_encode_to_themselves(tok.vocab, tok._merge_ids, tok._byte_ids, reference)
        assert fast == slow, (seed, merges)
        outcomes.add(slow)
    assert outcomes == {True, False}


def test_fast_parsers_agree_with_the_line_by_line_ones(tmp_path, golden_bpe):
    """The few-C-calls parsers give exactly what the per-line ones (which name a bad line)
    give, and leave every input they do not fully understand to them."""
    from packlm.tokenizer import formats

    text = (golden_bpe / "gpt2_merges.txt").read_text(encoding="utf-8")
    good = [
        text,
        text.replace("\n", "\r\n"),
        "Ġ t\n\nh e",
        "#version: 0.2",
        "",
        "a b\n\n\nc d\r\r\n",
    ]
    for k, case in enumerate(good):
        path = tmp_path / f"good{k}.txt"
        path.write_text(case, encoding="utf-8", newline="")
        slow = formats._merges_naming_the_bad_line(path, case.split("\n"))
        assert formats.read_merges_txt(path) == slow and all(type(a) is bytes for a, _ in slow)
    for k, case in enumerate(
        ["a b c", "a\tb", "a  b", " a b", "a b \n", "a\xa0b c", "ab", "a\x1cb", "a€ b", "a\x00 b"]
    ):
        path = tmp_path / f"bad{k}.txt"
        path.write_text(f"a b\n{case}\nc d", encoding="utf-8", newline="")
        with pytest.raises(ValueError, match=f"bad{k}.txt:2: expected two"):
            formats.read_merges_txt(path)

    table = json.loads((golden_bpe / "gpt2_vocab.json").read_text(encoding="utf-8"))
    table.update({"<|é|>": len(table), "<|🙂|>": len(table) + 1, "<|x|>": len(table) + 2})
    for specials in ([EOT], [EOT, "<|é|>", "<|x|>"], ["<|é|>", "<|🙂|>"]):
        if "<|🙂|>" not in specials:
            table.pop("<|🙂|>", None)
        path = tmp_path / "vocab.json"
        path.write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")
        fast = formats.read_vocab_json(path, specials)
        assert fast == formats._vocab_naming_the_bad_entry(path, table, set(specials))
        assert fast[table["<|é|>"]] == ("<|é|>".encode() if "<|é|>" in specials else b"<|\xe9|>")
    for bad in ({"a": 1.0}, {"a": True}, {"a": 0, "b": 0}, {"a b": 0}, {"a": [0]}):
        path.write_text(json.dumps(bad), encoding="utf-8")
        with pytest.raises(ValueError, match="vocab.json: (bad entry|id 0 appears twice)"):
            formats.read_vocab_json(path, [])
