"""Loading with a cache_dir: the tables a load derives are kept by the files' bytes, and a
later load from them is the same tokenizer; a broken or stale entry is recomputed."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from packlm.config.tokenizer import TokenizerConfig
from packlm.tokenizer import Tokenizer, formats
from packlm.tokenizer.obtain import get_tokenizer
from packlm.tokenizer.tables import _read_tables

EOT = "<|endoftext|>"
TEXT = "Hello, world! Grüße 你好 🙂\n\n  def f(x):\n\treturn x <|endoftext|> 'tis 1234567 abc"


def facts(tok: Tokenizer) -> dict:
    """Everything a user or a store can see of a tokenizer."""
    return {
        "ids": tok.encode(TEXT),
        "ordinary": tok.encode_ordinary(TEXT),
        "engine": tok.engine,
        "digest": tok.digest(),
        "vocab": tok.vocab,
        "merges": tok.merges,
        "specials": tok.special_token_ids,
        "state": tok.__getstate__(),
        "lengths": tok.token_byte_lengths().tolist(),
        "decode": tok.decode(tok.encode(TEXT)),
    }


def tables_files(cache_dir):
    return sorted((cache_dir / "tables").glob("*"))


def no_parsing(monkeypatch):
    """Make any parse of vocab.json / merges.txt fail: a load that passes read tables."""

    def fail(*args, **kwargs):
        raise AssertionError("the files were parsed although tables were kept")

    monkeypatch.setattr(formats, "read_vocab_json", fail)
    monkeypatch.setattr(formats, "read_merges_txt", fail)


def crossing_tokenizer() -> Tokenizer:
    """ "abc" never encodes to the token abc: no tiktoken ranks give these ids."""
    vocab = {i: bytes([i]) for i in range(256)}
    vocab.update({256: b"bc", 257: b"ab", 258: b"abc"})
    return Tokenizer(vocab, [(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")], [EOT])


def test_gpt2_files_from_tables_are_the_same_tokenizer(golden_bpe, tmp_path, monkeypatch):
    files = (golden_bpe / "gpt2_vocab.json", golden_bpe / "gpt2_merges.txt")
    plain = Tokenizer.from_files(*files, [EOT])
    cold = Tokenizer.from_files(*files, [EOT], cache_dir=tmp_path)
    assert len(tables_files(tmp_path)) == 1  # one entry, no temporary file left
    with monkeypatch.context() as m:
        no_parsing(m)
        warm = Tokenizer.from_files(*files, [EOT], cache_dir=tmp_path)
        assert warm.engine == "tiktoken"
    expected = facts(plain)
    assert facts(cold) == expected and facts(warm) == expected
    assert Tokenizer(**warm.__getstate__()).digest() == plain.digest()  # recomputed from scratch
    assert warm.to_tiktoken().encode(TEXT, allowed_special="all") == expected["ids"]
    other = Tokenizer.from_files(*files, [EOT, "<|pad|>"], cache_dir=tmp_path)
    assert other.special_token_ids["<|pad|>"] == 50257  # other options: another entry
    assert len(tables_files(tmp_path)) == 2


@pytest.mark.parametrize("which", ["small", "crossing"])
def test_saved_dir_from_tables_is_the_same_tokenizer(which, request, tmp_path, monkeypatch):
    tok = request.getfixturevalue("small_tokenizer") if which == "small" else crossing_tokenizer()
    tok.save(tmp_path / "tok")
    expected = facts(Tokenizer.load(tmp_path / "tok"))
    cold = Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "cache")
    with monkeypatch.context() as m:
        no_parsing(m)
        warm = Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "cache")
        assert facts(warm) == expected
    assert facts(cold) == expected
    assert warm.engine == ("tiktoken" if which == "small" else "python")


def test_engine_requests_with_tables(tmp_path):
    crossing_tokenizer().save(tmp_path / "tok")
    for _ in range(2):  # cold, then from tables
        python = Tokenizer.load(tmp_path / "tok", engine="python", cache_dir=tmp_path / "c")
        assert python.encode("abc") == [97, 256] and python.engine == "python"
        strict = Tokenizer.load(tmp_path / "tok", engine="tiktoken", cache_dir=tmp_path / "c")
        with pytest.raises(ValueError, match="engine='tiktoken'"):
            strict.encode("abc")
        with pytest.raises(ValueError, match="no tiktoken Encoding gives"):
            strict.to_tiktoken()
    with pytest.raises(ValueError, match="engine="):
        Tokenizer.load(tmp_path / "tok", engine="rust", cache_dir=tmp_path / "c")


def corruptions(path):
    """Ways a tables file can be wrong, each applied to a fresh copy of the good one."""
    good = path.read_bytes()
    yield "truncated", good[: len(good) // 2]
    yield "garbage", b"not a zip file at all"
    middle = bytearray(good)
    middle[len(good) // 2] ^= 0x40
    yield "one bit flipped", bytes(middle)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta"].tobytes())
    for key, value in [("tiktoken", not meta["facts"]["tiktoken"]), ("digest", "0" * 64)]:
        meta2 = json.loads(json.dumps(meta))
        meta2["facts"][key] = value  # a valid file whose facts do not match its checksum
        out = path.with_name("forged.npz")
        np.savez(out, **{**arrays, "meta": np.frombuffer(json.dumps(meta2).encode(), np.uint8)})
        yield f"forged {key}", out.read_bytes()
        out.unlink()
    merge_ids = arrays["merge_ids"].copy()
    merge_ids[[0, 1]] = merge_ids[[1, 0]]  # merges swapped, checksum kept
    out = path.with_name("forged.npz")
    np.savez(out, **{**arrays, "merge_ids": merge_ids})
    yield "forged merges", out.read_bytes()
    out.unlink()


def test_broken_tables_are_recomputed_never_trusted(tmp_path, small_tokenizer, caplog):
    small_tokenizer.save(tmp_path / "tok")
    expected = facts(Tokenizer.load(tmp_path / "tok"))
    Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "cache")
    (path,) = tables_files(tmp_path / "cache")
    good = path.read_bytes()
    for name, data in list(corruptions(path)):
        path.write_bytes(data)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            again = Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "cache")
        assert facts(again) == expected, name
        assert "recomputing the tokenizer tables" in caplog.text, name
        assert path.read_bytes() != data and _read_tables(path) is not None, name  # rewritten
    assert tables_files(tmp_path / "cache") == [path]
    assert _read_tables(path)["digest"] == expected["digest"] and len(good) > 0


def test_changed_files_are_read_again(tmp_path, small_tokenizer):
    small_tokenizer.save(tmp_path / "tok")
    vocab, merges = tmp_path / "tok" / formats.VOCAB, tmp_path / "tok" / formats.MERGES
    first = Tokenizer.from_files(vocab, merges, [EOT], cache_dir=tmp_path / "cache")
    lines = merges.read_text(encoding="utf-8").splitlines(keepends=True)
    merges.write_text("".join(lines[:-1]), encoding="utf-8")  # one merge fewer
    second = Tokenizer.from_files(vocab, merges, [EOT], cache_dir=tmp_path / "cache")
    assert len(second.merges) == len(first.merges) - 1
    assert second.digest() == Tokenizer.from_files(vocab, merges, [EOT]).digest()
    assert second.digest() != first.digest()
    assert len(tables_files(tmp_path / "cache")) == 2


def test_files_changed_while_a_load_reads_them_keep_no_tables(
    tmp_path, small_tokenizer, monkeypatch
):
    """Tables derived while a file changed would sit under the key of bytes they were not
    derived from: a load that sees its files change under it keeps none."""
    small_tokenizer.save(tmp_path / "tok")
    vocab, merges = tmp_path / "tok" / formats.VOCAB, tmp_path / "tok" / formats.MERGES
    read_merges = formats.read_merges_txt

    def read_then_change(*args, **kwargs):  # another process rewrites merges.txt meanwhile
        found = read_merges(*args, **kwargs)
        merges.write_text(merges.read_text(encoding="utf-8") + "\n", encoding="utf-8")
        return found

    monkeypatch.setattr(formats, "read_merges_txt", read_then_change)
    Tokenizer.from_files(vocab, merges, [EOT], cache_dir=tmp_path / "cache")
    assert tables_files(tmp_path / "cache") == []
    monkeypatch.setattr(formats, "read_merges_txt", read_merges)  # unchanged: kept
    Tokenizer.from_files(vocab, merges, [EOT], cache_dir=tmp_path / "cache")
    assert len(tables_files(tmp_path / "cache")) == 1


def test_cache_problems_never_stop_a_load(tmp_path, small_tokenizer, caplog):
    small_tokenizer.save(tmp_path / "tok")
    (tmp_path / "file").write_text("not a directory")
    with caplog.at_level(logging.WARNING):
        tok = Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "file")
    assert tok.digest() == small_tokenizer.digest() and "cannot keep the tokenizer" in caplog.text
    with pytest.raises(FileNotFoundError, match="vocab_path=.*nope.json"):
        Tokenizer.from_files(tmp_path / "nope.json", tmp_path / "m.txt", cache_dir=tmp_path)
    shutil.rmtree(tmp_path / "tok")
    with pytest.raises(FileNotFoundError, match="no saved tokenizer directory"):
        Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "cache")


def test_tokenizer_path_keeps_tables_in_the_cache_dir(tmp_path, small_tokenizer):
    small_tokenizer.save(tmp_path / "tok")
    cfg = TokenizerConfig(path=str(tmp_path / "tok")).validate()
    for _ in range(2):
        tok, _ = get_tokenizer(cfg, {}, None, tmp_path / "cache")
        assert tok.digest() == small_tokenizer.digest()
    assert len(tables_files(tmp_path / "cache" / "tokenizers")) == 1


def reference_digest(tok: Tokenizer) -> str:
    """The digest as first written (one Python step per token): stores are keyed by it."""
    import hashlib

    h = hashlib.sha256(b"packlm-bpe-1\0")
    h.update(tok.pattern_regex.encode("utf-8") + b"\0")
    h.update(json.dumps(tok.special_tokens).encode("utf-8") + b"\0")
    table = [tok.token_bytes(i) for i in range(tok.vocab_size)]
    h.update(b"".join([len(t).to_bytes(4, "little") + t for t in table]))
    h.update(
        b"".join([len(a).to_bytes(4, "little") + a + len(b).to_bytes(4, "little") + b
                  for a, b in tok.merges])
    )  # fmt: skip
    return h.hexdigest()


def test_digest_is_byte_identical(gpt2_tokenizer, small_tokenizer, tmp_path):
    bare = Tokenizer({i: bytes([i]) for i in range(256)}, [], [])
    for tok in (gpt2_tokenizer, small_tokenizer, crossing_tokenizer(), bare):
        assert tok.digest() == reference_digest(tok)
        tok.save(Path(tmp_path) / "t")
        warm = [Tokenizer.load(Path(tmp_path) / "t", cache_dir=tmp_path) for _ in range(2)][-1]
        assert warm.digest() == reference_digest(warm) == tok.digest()


def test_pickle_carries_the_verdict_only_when_checked(small_tokenizer, monkeypatch):
    import pickle

    from packlm.tokenizer import tokenizer as tokenizer_module

    calls = []
    real = tokenizer_module.tiktoken_ranks
    monkeypatch.setattr(
        tokenizer_module, "tiktoken_ranks", lambda *a: calls.append(a[-1] is None) or real(*a)
    )
    fresh = Tokenizer(small_tokenizer.vocab, small_tokenizer.merges, small_tokenizer.special_tokens)
    unchecked = pickle.loads(pickle.dumps(fresh))
    assert unchecked.encode(TEXT) == small_tokenizer.encode(TEXT) and calls == [False]
    checked = pickle.loads(pickle.dumps(unchecked))  # its parent checked: not again
    assert checked.encode(TEXT) == small_tokenizer.encode(TEXT) and calls == [False, True]
    assert checked.engine == "tiktoken" and checked.digest() == small_tokenizer.digest()
    crossing = crossing_tokenizer()
    assert crossing.encode("abc") == [97, 256]  # checked: no tiktoken ranks
    again = pickle.loads(pickle.dumps(crossing))
    assert again.encode("abc") == [97, 256] and again.engine == "python"
    assert calls[-1] is False  # a failed verdict is checked again, never trusted as a pass
    old = Tokenizer.__new__(Tokenizer)  # what a pickle of an older packlm does
    old.__setstate__(small_tokenizer.__getstate__())
    assert old.encode(TEXT) == small_tokenizer.encode(TEXT)
