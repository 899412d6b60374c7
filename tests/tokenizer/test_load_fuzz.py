"""One grammar for tokenizer files: vocab.json + merges.txt, a saved directory, a tokenizer.json
and a .tiktoken file, each damaged at random (hypothesis), either load as a short reference
reader written here from the formats' definitions reads them, or are refused in one short
line naming the file; never another exception, never a line quoting megabytes.

The reference readers are deliberately plain (json.loads, GPT-2's own bytes_to_unicode, one
line at a time): packlm's readers take faster routes (a regex over all of merges.txt, the byte
map as a codec), which must not change what a file means.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packlm.errors import ConfigError
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator
from packlm.tokenizer.obtain import load_path

SPECIALS = ["<|endoftext|>", "<|pad|>"]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=2_000, deadline=None, suppress_health_check=list(HealthCheck))
MESSAGE_LIMIT = 300  # characters of an error beside the paths it names


def gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's encoder.py, as published: printable bytes stand for themselves."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


BYTE_OF = {c: b for b, c in gpt2_bytes_to_unicode().items()}


class Refused(Exception):
    """The reference reader refuses the file."""


def token_of(text: object, specials: list[str]) -> bytes:
    if not isinstance(text, str):
        raise Refused(text)
    if text in specials:
        return text.encode("utf-8")
    if not text or any(c not in BYTE_OF for c in text):
        raise Refused(text)
    return bytes(BYTE_OF[c] for c in text)


def strict_json(data: bytes) -> object:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise Refused(e) from None


def reference_vocab(data: bytes, specials: list[str]) -> dict[int, bytes]:
    table = strict_json(data)
    if not isinstance(table, dict):
        raise Refused(table)
    vocab = {}
    for text, i in table.items():
        if type(i) is not int or i in vocab:
            raise Refused(i)
        vocab[i] = token_of(text, specials)
    return vocab


def reference_merges(data: bytes) -> list[tuple[bytes, bytes]]:
    """One "left right" merge a line; an empty line skipped; a first line "#version..."
    skipped; trailing CRs dropped (CRLF files)."""
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise Refused(e) from None
    merges = []
    for k, line in enumerate(lines):
        if not line or (k == 0 and line.startswith("#version")):
            continue
        parts = line.rstrip("\r").split(" ")
        if len(parts) != 2:
            raise Refused(line)
        merges.append((token_of(parts[0], []), token_of(parts[1], [])))
    return merges


def reference_tokenizer_json(data: bytes, specials: list[str]):
    """(vocab, merges, the file's special tokens) of a tokenizer.json's model and
    added_tokens: merges as "left right" strings or [left, right] pairs."""
    spec = strict_json(data)
    try:
        model, added = spec["model"], spec.get("added_tokens") or []
        vocab_json, merges_json = model["vocab"], model.get("merges", [])
        added = sorted(added, key=lambda t: t["id"])
        own = [t["content"] for t in added]
    except (KeyError, TypeError, AttributeError) as e:
        raise Refused(e) from None
    if not (isinstance(vocab_json, dict) and isinstance(merges_json, list)):
        raise Refused(model)
    if not all(type(t["id"]) is int and type(t["content"]) is str for t in added):
        raise Refused(added)
    vocab = {}
    for text, i in vocab_json.items():
        if type(i) is not int or i in vocab:
            raise Refused(i)
        vocab[i] = token_of(text, own)
    for t in added:
        vocab.setdefault(t["id"], t["content"].encode("utf-8"))
    merges = []
    for merge in merges_json:
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(pair, list) or len(pair) != 2:
            raise Refused(merge)
        merges.append((token_of(pair[0], []), token_of(pair[1], [])))
    return vocab, merges, own


def reference_tiktoken(data: bytes) -> dict[int, bytes]:
    """rank -> token of "base64(token) rank" lines (empty lines skipped)."""
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise Refused(e) from None
    ranks = {}
    for line in lines:
        if not line:
            continue
        parts = line.split()
        try:
            token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
        except (IndexError, ValueError, binascii.Error) as e:
            raise Refused(e) from None
        if len(parts) != 2 or rank in ranks or token in ranks.values():
            raise Refused(line)
        ranks[rank] = token
    if sorted(ranks) != list(range(len(ranks))):
        raise Refused(ranks)
    return ranks


# ---- damage ------------------------------------------------------------------------------

PIECES = [b"", b",", b"]", b"}", b"[", b"{", b'"', b":", b"\\", b"\\u00e9", b"\\ud800", b"\n",
          b"\r", b"\r\n", b" ", b"  ", b"\t", b"\x00", b"\xef\xbb\xbf", b"\xff", b"\xe9", b"0",
          b"-1", b"9223372036854775808", b"1.0", b"1e3", b"null", b"true", "Ġ".encode(),
          "\u00a0".encode(), "\u2028".encode(), b"#version: 0.2\n", b"QQ==", b"=", b"a b\n",
          b'"zz": 5, ', b"9" * 5000]  # fmt: skip


def _nest(data: bytes, at: int) -> bytes:
    return data[:at] + b"[" * 100_000 + b"]" * 100_000 + data[at:]


def _as_json(change):
    """A rewrite of a JSON file's parsed value (another file: unchanged)."""

    def rewrite(data: bytes, at: int) -> bytes:
        try:
            value = json.loads(data)
        except ValueError:
            return data
        return change(value).encode("utf-8", "surrogatepass")

    return rewrite


def _reordered(value):
    if isinstance(value, dict):
        return {k: _reordered(v) for k, v in reversed(value.items())}
    return value


WHOLE = {  # damage to a whole file, or a rewrite that keeps its meaning
    "none": lambda d, at: d,
    "escaped": _as_json(lambda v: json.dumps(v, ensure_ascii=True)),
    "indented": _as_json(lambda v: json.dumps(v, indent=1, ensure_ascii=False)),
    "reordered": _as_json(lambda v: json.dumps(_reordered(v), ensure_ascii=False)),
    "blank lines": lambda d, at: d.replace(b"\n", b"\n\n", 3),
    "truncated": lambda d, at: d[:at],
    "a BOM": lambda d, at: b"\xef\xbb\xbf" + d,
    "latin-1": lambda d, at: d.decode("utf-8", "replace").encode("latin-1", "replace"),
    "UTF-16": lambda d, at: d.decode("utf-8", "replace").encode("utf-16"),
    "deep nesting": _nest,
    "a 1 MB line": lambda d, at: d[:at] + "Ġ".encode() * 500_000 + d[at:],
    "a line twice": lambda d, at: d[:at] + d[d.rfind(b"\n", 0, at) + 1 : at] + d[at:],
    "a trailing comma": lambda d, at: d[:at] + d[at:].replace(b"}", b",}", 1).replace(b"]", b",]", 1),
    "CRLF": lambda d, at: d.replace(b"\n", b"\r\n"),
    "empty": lambda d, at: b"",
}  # fmt: skip


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """`data` with a whole-file damage and up to 3 pieces put in, each over 0-3 bytes."""
    data = WHOLE[draw(st.sampled_from(list(WHOLE)))](data, draw(st.integers(0, len(data))))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from(PIECES)) + data[at + draw(st.integers(0, 3)) :]
    return data


# ---- the tokenizer and its files ---------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Tokenizer, dict[str, bytes]]:
    """A 300-token tokenizer (fast to load in Python) and its files in each format."""
    texts = ["hello world, naïve café 🙂 'quoted' \"double\" back\\slash\n\tend"] * 20
    vocab, merges = train_bpe_from_iterator(texts, 300, SPECIALS, num_workers=1)
    tok = Tokenizer(vocab, merges, SPECIALS)
    root = tmp_path_factory.mktemp("tiny")
    tok.save(root / "saved")
    tok.save_hf(root / "tokenizer.json")
    ranks = tok._tiktoken_ranks()
    assert ranks is not None  # a file tiktoken can read
    lines = [f"{base64.b64encode(t).decode()} {i - 2}\n" for t, i in ranks.items()]  # ids 2..
    files = {name: (root / "saved" / name).read_bytes() for name in os.listdir(root / "saved")}
    files["tokenizer.json"] = (root / "tokenizer.json").read_bytes()
    files["gpt2.tiktoken"] = "".join(lines).encode("ascii")
    return tok, files


def outcome(load, path: Path):
    """The tokenizer, or the error's message, checked to be one short line naming `path`."""
    try:
        return load()
    except (ConfigError, ValueError, OSError) as e:  # a foreign type fails the test
        message = str(e)
        assert str(path) in message, message[:500]
        assert "\n" not in message, message[:500]
        beside = message.replace(str(path), "").replace(str(path.parent), "")
        assert len(beside) <= MESSAGE_LIMIT, message[:500]
        return message


def same_tables(tok: Tokenizer, vocab: dict[int, bytes], merges, specials) -> None:
    expected = Tokenizer(vocab, merges, specials, tok.pattern)
    assert tok._table == expected._table
    assert tok.merges == expected.merges
    assert tok.special_token_ids == expected.special_token_ids


def refused_alike(reference, loaded) -> None:
    """Where the reference reader refuses, packlm refuses (a message); else packlm loads what
    the reference read, or refuses where the tables the reference read cannot form a
    tokenizer either."""
    try:
        vocab, merges, specials = reference()
    except Refused:
        assert isinstance(loaded, str), "packlm loaded a file the reference refuses"
        return
    try:
        Tokenizer(vocab, merges, specials)
    except ValueError:
        assert isinstance(loaded, str), "packlm loaded tables that form no tokenizer"
        return
    assert not isinstance(loaded, str), f"packlm refused a file the reference reads: {loaded}"
    same_tables(loaded, vocab, merges, specials)


def gpt2_case(tmp_path, files, which: str, data: bytes) -> None:
    folder = tmp_path / "gpt2"
    folder.mkdir(exist_ok=True)
    contents = {"vocab.json": files["vocab.json"], "merges.txt": files["merges.txt"], which: data}
    for name, body in contents.items():
        (folder / name).write_bytes(body)
    loaded = outcome(lambda: load_path(folder, special_tokens=SPECIALS), folder)

    def reference():
        vocab = reference_vocab(contents["vocab.json"], SPECIALS)
        return vocab, reference_merges(contents["merges.txt"]), SPECIALS

    refused_alike(reference, loaded)


@FAST
@given(data=st.data(), which=st.sampled_from(["vocab.json", "merges.txt"]))
def test_damaged_gpt2_files_load_as_the_reference_reads_them(tiny, tmp_path_factory, data, which):
    _, files = tiny
    gpt2_case(tmp_path_factory.mktemp("f"), files, which, data.draw(damaged(files[which])))


@FAST
@given(data=st.data())
def test_damaged_tokenizer_json_loads_as_the_reference_reads_it(tiny, tmp_path_factory, data):
    tok, files = tiny
    path = tmp_path_factory.mktemp("j") / "tokenizer.json"
    body = files["tokenizer.json"]
    if data.draw(st.booleans()):  # merges as [left, right] pairs, indented (HF's own files)
        spec = json.loads(body)
        spec["model"]["merges"] = [m.split(" ") for m in spec["model"]["merges"]]
        body = json.dumps(spec, indent=2, ensure_ascii=False).encode("utf-8")
    path.write_bytes(data.draw(damaged(body)))
    loaded = outcome(lambda: load_path(path, special_tokens=SPECIALS), path)

    def reference():
        vocab, merges, own = reference_tokenizer_json(path.read_bytes(), SPECIALS)
        return vocab, merges, [*SPECIALS, *(s for s in own if s not in SPECIALS)]

    others = ("pre_tokenizer", "byte-level BPE without a normalizer", "pattern=")
    if isinstance(loaded, str) and any(s in loaded for s in others):
        return  # a damaged pre_tokenizer, normalizer or model type: not vocab and merges
    refused_alike(reference, loaded)


@FAST
@given(data=st.data())
def test_damaged_tiktoken_file_loads_as_the_reference_reads_it(tiny, tmp_path_factory, data):
    """A loaded .tiktoken file holds each line's token at its rank, every merge joins two
    lower ranks into a higher one, and the special tokens come after the ranks."""
    _, files = tiny
    path = tmp_path_factory.mktemp("t") / "gpt2.tiktoken"
    path.write_bytes(data.draw(damaged(files["gpt2.tiktoken"])))
    loaded = outcome(lambda: load_path(path, special_tokens=SPECIALS), path)
    try:
        ranks = reference_tiktoken(path.read_bytes())
    except Refused:
        assert isinstance(loaded, str), "packlm loaded a file the reference refuses"
        return
    if isinstance(loaded, str):  # a rank that is no merge of two lower ones, a byte missing
        assert "not a merge of two lower ranks" in loaded or "vocab:" in loaded, loaded
        return
    assert loaded._table[: len(ranks)] == [ranks[i] for i in range(len(ranks))]
    assert list(loaded.special_token_ids.values()) == [len(ranks), len(ranks) + 1]
    assert all(max(a, b) < c for a, b, c in loaded._merge_ids)


@FAST
@given(data=st.data(), which=st.sampled_from(["vocab.json", "merges.txt", "tokenizer_config.json"]))
def test_damaged_saved_directory_loads_or_is_refused_in_one_line(tiny, tmp_path_factory, data,
                                                                 which):  # fmt: skip
    """A saved directory loads only as the tokenizer that was saved (its digest vouches)."""
    tok, files = tiny
    folder = tmp_path_factory.mktemp("s")
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (folder / name).write_bytes(files[name])
    (folder / which).write_bytes(data.draw(damaged(files[which])))
    loaded = outcome(lambda: load_path(folder), folder)
    if not isinstance(loaded, str):
        assert loaded.digest() == tok.digest()


@pytest.mark.slow
@SLOW
@given(data=st.data(), which=st.sampled_from(["vocab.json", "merges.txt"]))
def test_damaged_gpt2_files_many(tiny, tmp_path_factory, data, which):
    _, files = tiny
    gpt2_case(tmp_path_factory.mktemp("f"), files, which, data.draw(damaged(files[which])))


# ---- what is not a file -------------------------------------------------------------------


def test_a_fifo_a_directory_or_a_link_loop_is_refused_without_waiting(tiny, tmp_path):
    """Where a tokenizer file should be: a FIFO (reading it would wait for a writer for
    ever), a directory, a symbolic link loop. Each is one error naming it, at once."""
    tok, files = tiny
    cases = {}
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        for kind in ("fifo", "dir", "loop"):
            folder = tmp_path / f"{name}-{kind}"
            folder.mkdir()
            for other in ("vocab.json", "merges.txt", "tokenizer_config.json"):
                if other != name:
                    (folder / other).write_bytes(files[other])
            target = folder / name
            if kind == "fifo":
                os.mkfifo(target)
            elif kind == "dir":
                target.mkdir()
            else:
                target.symlink_to(folder / "loop2")
                (folder / "loop2").symlink_to(target)
            cases[name, kind] = folder
    tiktoken_fifo = tmp_path / "ranks.tiktoken"
    os.mkfifo(tiktoken_fifo)
    results = {}

    def run():
        for key, folder in cases.items():
            for cache in (None, tmp_path / "cache"):
                results[key, cache] = outcome(lambda f=folder, c=cache: load_path(f, cache_dir=c),
                                              folder)  # fmt: skip
        results["tiktoken"] = outcome(lambda: load_path(tiktoken_fifo), tiktoken_fifo)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "a load waits on a FIFO"
    assert all(isinstance(r, str) for r in results.values()), results


def test_the_example_files_of_the_issue_end_in_one_short_line(tiny, tmp_path):
    """Deeply nested JSON as vocab.json or tokenizer.json (a RecursionError traceback
    before), a 50 MB merges.txt line (the whole line quoted before), and a vocab.json with a
    trailing comma (loaded by the C reader, refused by the Python one, before)."""
    _, files = tiny
    nested = b"[" * 1_000_000 + b"]" * 1_000_000
    cases = {
        "vocab.json": nested,
        "merges.txt": files["merges.txt"] + b"x" * 50_000_000 + b" y z\n",
        "comma/vocab.json": files["vocab.json"].rstrip().rstrip(b"}").rstrip() + b",\n}",
    }
    for name, body in cases.items():
        folder = tmp_path / name.replace("/", "-")
        folder.mkdir()
        (folder / "vocab.json").write_bytes(files["vocab.json"])
        (folder / "merges.txt").write_bytes(files["merges.txt"])
        (folder / Path(name).name).write_bytes(body)
        message = outcome(lambda f=folder: load_path(f, special_tokens=SPECIALS), folder)
        assert isinstance(message, str) and len(message) < 500, message[:600]
    (tmp_path / "tokenizer.json").write_bytes(nested)
    message = outcome(lambda: load_path(tmp_path / "tokenizer.json"), tmp_path / "tokenizer.json")
    assert "JSON nested too deeply to read" in message, message


@pytest.mark.parametrize(
    "entry, says",
    [
        ('"ab": 9223372036854775808', "without gaps"),  # 2**63
        ('"ab": -1', "without gaps"),
        ('"ab": 5', "appears twice"),
        ('"ab": 400', "without gaps"),  # a gap
        ('"ab": "7"', "bad entry"),
        ('"ab": true', "bad entry"),
        ('"ab": [[[[[[1]]]]]]', "bad entry"),
    ],
)
def test_ids_out_of_range_or_of_another_type_are_named(tiny, tmp_path, entry, says):
    _, files = tiny
    (tmp_path / "vocab.json").write_bytes(
        files["vocab.json"].replace(b"{", b"{" + entry.encode() + b",", 1)
    )
    (tmp_path / "merges.txt").write_bytes(files["merges.txt"])
    message = outcome(lambda: load_path(tmp_path, special_tokens=SPECIALS), tmp_path)
    assert says in message, message


def test_a_merge_of_unknown_tokens_is_named_briefly(tiny, tmp_path):
    _, files = tiny
    (tmp_path / "vocab.json").write_bytes(files["vocab.json"])
    long = "Ġ" * 100_000
    (tmp_path / "merges.txt").write_text(f"{long} Ġ\n", encoding="utf-8")
    message = outcome(lambda: load_path(tmp_path, special_tokens=SPECIALS), tmp_path)
    assert "merges[0]" in message and "not in vocab" in message, message
