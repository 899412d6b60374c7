"""The C loading path (loading.py, _load.c) gives exactly the tables of the Python path, and
leaves every input it does not fully understand to it (which names the bad entry)."""

from __future__ import annotations

import base64
import json
import random

import numpy as np
import pytest
import regex

from packlm.tokenizer import Tokenizer, encoder, formats, hf, loading

EOT = "<|endoftext|>"
TEXT = "Hello, naïve 🙂 world\n\n  def f(x):\n\treturn x <|endoftext|> 'tis 1234567"

pytestmark = pytest.mark.skipif(loading._load is None, reason="the C extension is not built")


def python_path(monkeypatch, load):
    with monkeypatch.context() as m:
        m.setattr(loading, "_load", None)
        return load()


def same_tables(a: Tokenizer, b: Tokenizer) -> None:
    assert a._table == b._table and a._byte_ids == b._byte_ids
    assert a._merge_rows.tolist() == b._merge_rows.tolist() and a.merges == b.merges
    assert a.special_token_ids == b.special_token_ids and a.vocab == b.vocab
    assert a.digest() == b.digest() and a.engine == b.engine
    assert a._tiktoken_ranks() == b._tiktoken_ranks()
    assert a.encode(TEXT) == b.encode(TEXT)


def test_gpt2_files_give_the_python_tables(golden_bpe, monkeypatch):
    files = golden_bpe / "gpt2_vocab.json", golden_bpe / "gpt2_merges.txt"
    for specials in ([EOT], [], [EOT, "<|pad|>"]):
        fast = Tokenizer.from_files(*files, specials)
        assert fast._merge_list is None  # the C path was taken
        slow = python_path(monkeypatch, lambda s=specials: Tokenizer.from_files(*files, s))
        same_tables(fast, slow)


def test_saved_dir_gives_the_python_tables(small_tokenizer, tmp_path, monkeypatch):
    small_tokenizer.save(tmp_path)
    fast = Tokenizer.load(tmp_path)
    assert fast._merge_list is None
    same_tables(fast, python_path(monkeypatch, lambda: Tokenizer.load(tmp_path)))
    same_tables(fast, small_tokenizer)


@pytest.mark.parametrize(
    "vocab, merges",
    [
        ('{"a": 0, "b": 1}', "a b\n"),  # no byte 0..255 set: Python names what is missing
        ('{"\\u0041": 0}', ""),  # an escape: left to Python
        ('{"a": 0, "a": 1}', ""),  # a key twice
        ('{"a": 0, "b": 0}', ""),  # an id twice
        ('{"a": 1.0}', ""),  # not an int
        ('{"a": 0} x', ""),  # extra data
        ("[1]", ""),
    ],
)
def test_unusual_files_go_to_the_python_path(tmp_path, vocab, merges):
    (tmp_path / "v.json").write_text(vocab, encoding="utf-8")
    (tmp_path / "m.txt").write_text(merges, encoding="utf-8")
    assert loading.gpt2_tables(tmp_path / "v.json", tmp_path / "m.txt", []) is None
    with pytest.raises(ValueError):
        Tokenizer.from_files(tmp_path / "v.json", tmp_path / "m.txt")


def test_bad_merge_lines_go_to_the_python_path(tmp_path, small_tokenizer):
    small_tokenizer.save(tmp_path)
    good = (tmp_path / "merges.txt").read_text(encoding="utf-8")
    head, first, rest = good.split("\n", 2)
    specials = small_tokenizer.special_tokens
    for bad in (f"{head}\n{first.replace(' ', '  ')}\n{rest}", good + "x\n",
                good.replace("\n", "\r\n")):  # fmt: skip
        (tmp_path / "merges.txt").write_text(bad, encoding="utf-8")
        found = loading.gpt2_tables(tmp_path / "vocab.json", tmp_path / "merges.txt", specials)
        assert found is None
        if "\r" in bad:  # the Python path reads CRLF lines: the same tokenizer, or no digest
            assert Tokenizer.load(tmp_path).digest() == small_tokenizer.digest()
            continue
        with pytest.raises(ValueError, match="merges.txt"):
            Tokenizer.load(tmp_path)


def test_c_check_agrees_with_bpe_of_every_merged_token():
    """On random merge lists (about half with a token that does not encode to itself), the
    C verdict is the Python one, and its ranks are tiktoken's. A quarter of the lists are
    shuffled, so that a merge can take a part made only later (the C check then runs BPE on
    every merged token instead of walking the pairs across each merge's boundary)."""
    outcomes = set()
    for seed in range(1200):
        rng = random.Random(seed)
        tokens, merges = [bytes([97 + i]) for i in range(rng.randint(1, 3))], []
        for _ in range(rng.randint(1, 20)):
            a, b = rng.choice(tokens), rng.choice(tokens)
            if a + b not in tokens and len(a + b) <= 12:
                tokens.append(a + b)
                merges.append((a, b))
        if seed % 4 == 0:
            rng.shuffle(merges)
        vocab = {i: bytes([i]) for i in range(256)}
        vocab.update({256 + k: a + b for k, (a, b) in enumerate(merges)})  # ids in merge order
        tok = Tokenizer(vocab, merges, engine="python")
        reference = tok._python_encoder()
        slow = all(reference.encode_piece(tok.vocab[c]) == [c] for _, _, c in tok._merge_ids)
        ranks = loading.tiktoken_ranks(tok._table, tok._byte_ids, tok._merge_rows, True)
        assert bool(ranks) == slow, (seed, merges)
        if ranks:
            assert ranks == encoder.rank_table(tok._table, tok._byte_ids, tok._merge_rows)
        outcomes.add(slow)
    assert outcomes == {True, False}


def test_c_check_refuses_a_token_twice_or_ids_that_do_not_rise(monkeypatch):
    """Tables no ranks can serve (a merged token twice, one equal to a byte, merged ids not
    rising above every byte's) get no ranks in C, as in Python; the plain tables get them."""
    table = [bytes([i]) for i in range(256)]
    cases = {
        "plain": (table + [b"ab", b"abc"], [(97, 98, 256), (256, 99, 257)]),
        "a token twice": (table + [b"ab", b"ab"], [(97, 98, 256), (97, 98, 257)]),
        "a byte again": (table + [b"ab", b"a"], [(97, 98, 256), (97, 98, 257)]),
        "not rising": (table + [b"ab", b"abc"], [(256, 99, 257), (97, 98, 256)]),
        "below a byte": ([b"ab", *table[1:], b"\0"], [(97, 98, 0)]),
    }
    for name, (tokens, rows) in cases.items():
        byte_ids = [256 if b == 0 and name == "below a byte" else b for b in range(256)]
        merge_rows = np.array(rows, dtype=np.int32)
        fast = encoder.tiktoken_ranks(tokens, merge_rows, byte_ids, None)
        with monkeypatch.context() as m:
            m.setattr(loading, "_load", None)
            slow = encoder.tiktoken_ranks(tokens, merge_rows, byte_ids, None)
        assert fast == slow, name
        assert (fast is not None) == (name == "plain"), name


def test_c_serialization_is_the_digest_bytes(small_tokenizer):
    table = small_tokenizer._table
    assert loading.serialized(table) == b"".join(len(t).to_bytes(4, "little") + t for t in table)
    idx = np.array([3, 0, 7], dtype=np.int32)
    assert loading.serialized(table, idx) == b"".join(
        len(table[i]).to_bytes(4, "little") + table[i] for i in idx.tolist()
    )
    digest = formats.digest("p", [], table, small_tokenizer._merge_rows)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(loading, "_load", None)
        assert formats.digest("p", [], table, small_tokenizer._merge_rows) == digest


def test_c_split_gives_the_kept_tokens(small_tokenizer, tmp_path, monkeypatch):
    """The tables file's tokens come back as they were, in C or in Python, and ends that do
    not cut the blob exactly are refused."""
    table = small_tokenizer._table
    ends = np.cumsum([len(t) for t in table])
    assert loading.split(b"".join(table), ends) == table
    assert loading.split(b"", np.zeros(0, dtype=np.int64)) == []
    for bad in ([3, 2, 5], [1, 2], [1, 9]):  # falling, short of the end, past it
        with pytest.raises(ValueError, match="do not cut"):
            loading.split(b"abcde", np.array(bad))
    small_tokenizer.save(tmp_path / "tok")
    Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "c")  # keeps the tables
    kept = Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "c")
    without_c = python_path(
        monkeypatch, lambda: Tokenizer.load(tmp_path / "tok", cache_dir=tmp_path / "c")
    )
    assert kept._table == without_c._table == table


def test_c_join_is_split_inverted_and_the_python_join(small_tokenizer, monkeypatch):
    """The tables file's blob and ends, joined in C, are the Python join's and split back to
    the tokens; a table holding anything but bytes is refused."""
    table = [*small_tokenizer._table, b"", b"\x00\xff"]
    blob, ends = loading.join(table)
    assert ends.dtype == np.int64 and loading.split(blob, ends) == table
    py_blob, py_ends = python_path(monkeypatch, lambda: loading.join(table))
    assert blob == py_blob == b"".join(table) and ends.tolist() == py_ends.tolist()
    assert loading.join([])[0] == b"" and loading.join([])[1].size == 0
    with pytest.raises(ValueError, match="not a token"):
        loading.join([b"a", "b"])


def test_tokenizer_json_gives_the_python_tables(small_tokenizer, tmp_path, monkeypatch):
    """A tokenizer.json's tables found in C are those of the Python path, for merges as
    strings or pairs, added tokens inside the vocab, after it or literal UTF-8, and extra
    special tokens; a file the Python path refuses is refused the same way."""
    small_tokenizer.save_hf(tmp_path / "base.json")
    base = json.loads((tmp_path / "base.json").read_text(encoding="utf-8"))
    size = len(base["model"]["vocab"])
    variants = {
        "strings": lambda s: s,
        "pairs": lambda s: s["model"].update(merges=[m.split(" ") for m in s["model"]["merges"]]),
        "added": lambda s: s["added_tokens"].extend(
            [{"id": size, "content": "<|new|>"}, {"id": 3, "content": "<|kept|>"}]
        ),
        "literal": lambda s: (
            s["model"]["vocab"].update({"<|ünï|>": size})
            or s["added_tokens"].append({"id": size, "content": "<|ünï|>"})
        ),
        "gap": lambda s: s["added_tokens"].append({"id": size + 5, "content": "<|far|>"}),
        "not byte-level": lambda s: s["model"]["vocab"].update({"a b": size}),
    }
    refused = set()
    for name, change in variants.items():
        spec = json.loads(json.dumps(base))
        change(spec)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        load = lambda p=path: hf.load_tokenizer_json(Tokenizer, p, ["<|extra|>"])  # noqa: E731
        try:
            expected = python_path(monkeypatch, load)
        except ValueError as e:
            with pytest.raises(ValueError, match=regex.escape(str(e))):
                load()
            refused.add(name)
            continue
        fast = load()
        assert fast._merges is None, name  # from the C tables
        same_tables(fast, expected)
    assert refused == {"gap", "not byte-level"}


def random_byte_level(seed: int) -> Tokenizer:
    """GPT-2's 256 bytes plus up to 60 random merges, often of bytes that JSON escapes (quote,
    backslash, slash, control characters) or that GPT-2's map sends above U+00FF, and up to 3
    special tokens with quotes, backslashes, control characters, non-ASCII and characters
    beyond the BMP."""
    rng = random.Random(seed)
    tokens = [bytes([b]) for b in range(256)]
    odd = [b'"', b"\\", b"/", b"\x00", b"\n", b" ", b"\x7f", b"\xad", b"\xc3", b"\xff"]
    merges = []
    for _ in range(rng.randint(0, 60)):
        a, b = (rng.choice(odd if rng.random() < 0.4 else tokens) for _ in range(2))
        if a + b not in tokens and len(a + b) <= 8:
            tokens.append(a + b)
            merges.append((a, b))
    pool = [EOT, 'say "hi"\\n', "<|🙂|>", "tab\there", "<|ü/ß|>", "\x00nul",
            "<|\U0001f600\u20ac|>"]  # fmt: skip
    specials = rng.sample(pool, rng.randint(0, 3))
    return Tokenizer(dict(enumerate(tokens)), merges, specials, engine="python")


def test_tokenizer_json_cut_in_c_gives_the_python_tables(tmp_path, monkeypatch):
    """Where C cuts a tokenizer.json's model.vocab and model.merges out (json.loads parses only
    the rest), the tables are the Python path's: random vocabularies and merge lists, compact
    or indented, non-ASCII as \\uXXXX (surrogate pairs beyond the BMP) or raw UTF-8, with \\"
    \\\\ \\/ and control character escapes, merges as strings, pairs or both."""
    for seed in range(40):
        rng = random.Random(seed)
        spec = hf.tokenizer_json(random_byte_level(seed))
        strings = spec["model"]["merges"]
        spec["model"]["merges"] = [
            m.split(" ") if form == "pairs" or (form == "both" and k % 2) else m
            for form in [rng.choice(["strings", "pairs", "both"])]
            for k, m in enumerate(strings)
        ]
        if rng.random() < 0.3:  # the merges before the vocab
            model = spec["model"]
            spec["model"] = {"merges": model.pop("merges"), **model}
        indent = rng.choice([None, 2])
        compact = indent is None and rng.random() < 0.5
        text = json.dumps(spec, ensure_ascii=rng.random() < 0.5, indent=indent,
                          separators=(",", ":") if compact else None)  # fmt: skip
        if "/" in text and rng.random() < 0.5:
            text = text.replace("/", "\\/")  # the escape json.dumps never writes
        path = tmp_path / f"{seed}.json"
        path.write_text(text, encoding="utf-8")
        assert hf._read_cut(path) is not None, seed  # the C cut is taken
        load = lambda p=path: hf.load_tokenizer_json(Tokenizer, p, [])  # noqa: E731
        fast = load()
        assert fast._merges is None, seed
        same_tables(fast, python_path(monkeypatch, load))


def edit(old: str, new: str):
    return lambda text: text.replace(old, new, 1)


def on_model(change):
    """A change of the file's parsed model, written back as JSON."""

    def changed(text: str) -> str:
        spec = json.loads(text)
        change(spec["model"])
        return json.dumps(spec)

    return changed


def some_pairs(model: dict) -> None:
    model["merges"] = [m.split(" ") if k % 2 else m for k, m in enumerate(model["merges"])]


@pytest.mark.parametrize(
    "name, change, cut",
    [
        ("as written", lambda t: t, True),
        ("model twice", lambda t: t[:-1] + ', "model": {"type": "BPE", "vocab": {}}}', False),
        ("vocab twice", edit('"model": {', '"model": {"vocab": {"a": 0}, '), False),
        ("merges twice", edit('"model": {', '"model": {"merges": [], '), False),
        ("an escaped key", edit('"vocab":', '"voc\\u0061b":'), False),
        ("an escaped model", edit('"model":', '"mod\\u0065l":'), False),
        ("no merges", on_model(lambda m: m.pop("merges")), False),
        ("deep nesting", edit('"padding": null', '"padding": ' + "[" * 200 + "]" * 200), False),
        ("NaN elsewhere", edit('"padding": null', '"padding": NaN'), True),
        ("a syntax error elsewhere", edit('"padding": null', '"padding": nul'), True),
        ("a trailing comma elsewhere", edit('"padding": null', '"padding": [1,]'), False),
        ("a normalizer", edit('"normalizer": null', '"normalizer": {"type": "NFC"}'), True),
        ("a BOM", lambda t: "\ufeff" + t, False),
        ("extra data", lambda t: t + " {}", False),
        ("not an object", lambda t: "[" + t + "]", False),
        ("a lone surrogate elsewhere", edit('"model": {', '"model": {"x": "\\ud800", '), True),
        ("a lone surrogate token", edit('"vocab": {', '"vocab": {"\\udc00": 0, '), True),
        ("an id 1.0", edit('"vocab": {', '"vocab": {"zz": 1.0, '), True),
        ("an id twice", edit('"vocab": {', '"vocab": {"zz": 3, '), True),
        ("a leading zero", edit('"vocab": {', '"vocab": {"zz": 00, '), True),
        ("no colon", edit('"vocab": {', '"vocab": {"zz" 0, '), False),
        ("merges: pairs and strings", on_model(some_pairs), True),
        ("merges: a trailing comma", lambda t: t[:-3] + ",]}}", False),
        ("merges: an empty one", edit('"merges": [', '"merges": ["", '), False),
        ("merges: a newline", edit('"merges": [', '"merges": ["a b\\nc d", '), False),
        ("merges: three parts", edit('"merges": [', '"merges": [["a", "b", "c"], '), False),
        ("merges: a space in a pair", edit('"merges": [', '"merges": [["a b", "c"], '), False),
        ("merges: a number", edit('"merges": [', '"merges": [5, '), False),
        ("merges: not byte-level", edit('"merges": [', '"merges": ["a\\tb c", '), True),
        ("merges: a CR", edit('"merges": [', '"merges": ["a b\\r", '), True),
        ("merges: not in the vocab", edit('"merges": [', '"merges": ["zq qz", '), True),
    ],
)
def test_tokenizer_json_unusual_files_give_the_python_result(small_tokenizer, tmp_path, monkeypatch,
                                                             name, change, cut):  # fmt: skip
    """A file C does not cut (or whose cut pieces it does not read) gives what the Python
    path gives: the same tables, or the same error naming the file and entry."""
    small_tokenizer.save_hf(tmp_path / "base.json")
    text = json.dumps(json.loads((tmp_path / "base.json").read_text(encoding="utf-8")))
    assert text.endswith('"]}}')  # the merges close the model and the file
    path = tmp_path / "tokenizer.json"
    path.write_bytes(change(text).encode("utf-8"))
    assert (loading.cut_tokenizer_json(path.read_bytes()) is not None) == cut, name
    load = lambda: hf.load_tokenizer_json(Tokenizer, path, [EOT])  # noqa: E731
    try:
        expected = python_path(monkeypatch, load)
    except ValueError as e:
        with pytest.raises(ValueError, match=regex.escape(str(e))):
            load()
        return
    same_tables(load(), expected)


def test_tokenizer_json_with_random_damage_gives_the_python_result(tmp_path, monkeypatch):
    """Files damaged at random (characters, escapes and JSON syntax put in, taken out or
    swapped; mostly inside the vocab and merges, the bulk of a file) load as in Python: the
    same tables, or a ValueError with the same message."""

    def outcome(load):
        try:
            tok = load()
        except ValueError as e:
            return str(e)
        return tok._table, tok._merge_rows.tolist(), tok.special_token_ids

    spec = hf.tokenizer_json(random_byte_level(3))
    pairs = json.loads(json.dumps(spec))
    pairs["model"]["merges"] = [m.split(" ") for m in spec["model"]["merges"]]
    texts = [json.dumps(spec, ensure_ascii=False), json.dumps(pairs, indent=1)]
    pieces = [*'{}[]":,\\ u0a\n', "\\u00e9", "\\ud83d", "\\ude00", "null", "1.0", "-1", "Ġ", "\0"]
    path = tmp_path / "tokenizer.json"
    load = lambda: hf.load_tokenizer_json(Tokenizer, path, [EOT])  # noqa: E731
    for seed in range(300):
        rng = random.Random(seed)
        text = rng.choice(texts)
        for _ in range(rng.randint(1, 3)):  # 0 to 3 characters replaced by a piece or nothing
            i, removed = rng.randrange(len(text)), rng.randint(0, 3)
            text = text[:i] + rng.choice(["", *pieces]) + text[i + removed :]
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        assert outcome(load) == outcome(lambda: python_path(monkeypatch, load)), seed


def test_tiktoken_file_gives_the_python_tables(small_tokenizer, tmp_path, monkeypatch):
    """A .tiktoken file's tokens and recovered merges found in C are those of the Python
    path; any file the C path does not take (a bad line, a gap, a token that is no merge of
    two lower ranks, CRLF, a special token among the ranks) gives the Python path's result."""
    from packlm.errors import ConfigError
    from packlm.tokenizer.obtain import load_path

    ranks = small_tokenizer._tiktoken_ranks()  # ids 2.. (the special tokens come first)
    tokens = sorted(ranks, key=ranks.__getitem__)
    lines = [f"{base64.b64encode(t).decode()} {i}" for i, t in enumerate(tokens)]
    word = next(t for t in tokens if len(t) > 2 and t.isalpha()).decode()  # a merged token
    variants = {
        "plain": lines,
        "shuffled": random.Random(0).sample(lines, len(lines)),
        "crlf": [line + "\r" for line in lines],
        "empty line": [*lines[:5], "", *lines[5:]],
        "gap": [*lines[:-1], lines[-1].split()[0] + f" {len(lines) + 3}"],
        "bad base64": ["QQ " + lines[0].split()[1], *lines[1:]],
        "no merge": [*lines, f"{base64.b64encode(b'zzqq').decode()} {len(lines)}"],
        "a byte ranked last": [  # merged ranks no longer rise above every byte's: no ranks
            f"{t.split()[0]} {i}" for i, t in enumerate([*lines[:65], *lines[66:], lines[65]])
        ],
    }
    specials = {"special inside": ["<|endoftext|>", word]}
    taken, refused = set(), set()
    for name, body in [*variants.items(), ("special inside", lines)]:
        path = tmp_path / f"{name.replace(' ', '_')}.tiktoken"
        path.write_text("\n".join(body) + "\n", encoding="utf-8")
        special_tokens = specials.get(name, ["<|endoftext|>"])
        load = lambda p=path, s=special_tokens: load_path(p, special_tokens=s)  # noqa: E731
        try:
            expected = python_path(monkeypatch, load)
        except ConfigError as e:
            with pytest.raises(ConfigError, match=regex.escape(str(e))):
                load()
            refused.add(name)
            continue
        fast = load()
        if fast._merges is None:  # from the C tables
            taken.add(name)
        same_tables(fast, expected)
    assert taken == {"plain", "shuffled", "a byte ranked last"}
    assert refused == {"gap", "bad base64", "no merge", "special inside"}


def test_tiktoken_files_of_random_ranks_give_the_python_tables_and_check(tmp_path, monkeypatch):
    """Over .tiktoken files of random tokens (each a merge of two lower ranks) of a few
    letters, the C path's merges and tiktoken ranks (checked as the file is read) are the
    Python path's, whose check runs merge-order BPE of every merged token; so are the ids of
    texts of those letters."""
    from packlm.tokenizer.obtain import load_path

    engines = set()
    for seed in range(40):
        rng = random.Random(seed)
        letters = rng.choice([b"ab", b"abc", b"abcd"])
        ranks = {bytes([b]): b for b in range(256)}
        while len(ranks) < 256 + 40:
            token = bytes(rng.choice(letters) for _ in range(rng.randint(2, 7)))
            if token not in ranks and len(formats._rank_bpe(ranks, token, len(ranks))) == 2:
                ranks[token] = len(ranks)
        tokens = list(ranks)
        if seed % 4 == 0:  # a letter ranked last: no tiktoken ranks then
            tokens.remove(letters[:1])
            tokens.append(letters[:1])
        path = tmp_path / f"{seed}.tiktoken"
        path.write_text("".join(f"{base64.b64encode(t).decode()} {i}\n"
                                for i, t in enumerate(tokens)), encoding="ascii")  # fmt: skip
        load = lambda p=path: load_path(p, special_tokens=[EOT])  # noqa: E731
        fast, slow = load(), python_path(monkeypatch, load)
        assert fast._merges is None, seed  # from the C tables
        same_tables(fast, slow)
        text = "".join(rng.choice(letters.decode()) for _ in range(200))
        assert fast.encode(text) == slow.encode(text), seed
        engines.add(fast.engine)
    assert engines == {"tiktoken", "python"}
