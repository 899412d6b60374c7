"""Tokenizer files: GPT-2's vocab.json + merges.txt, and packlm's saved directory.

GPT-2 writes each token's bytes as printable characters (its byte-to-unicode map), so
the files are JSON and text. A saved directory is those two files plus
tokenizer_config.json (pattern, special tokens, digest); loading recomputes the
digest, so a corrupt or half-written directory fails loudly instead of encoding
differently. Every file is written to a temporary name and renamed into place.

Every tokenizer file is read here or in hf.py, in Python, by one grammar: strict JSON (the
json module) and "left right" lines. A file packlm cannot use is a ValueError in one short
line naming the file, quoting at most `excerpt` of the offending line or entry.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import hashlib
import itertools
import json
import os
import re
import reprlib
import stat
from pathlib import Path

import numpy as np

FORMAT, VERSION = "packlm-bpe", 1
CONFIG, VOCAB, MERGES = "tokenizer_config.json", "vocab.json", "merges.txt"
SAVED_FILES = (CONFIG, VOCAB, MERGES)


PRINTABLE_BYTES = [
    *range(ord("!"), ord("~") + 1),
    *range(ord("¡"), ord("¬") + 1),
    *range(ord("®"), ord("ÿ") + 1),
]
# GPT-2's order of the 256 single bytes in its vocab.json: printable first, then the rest.
GPT2_BYTE_ORDER = PRINTABLE_BYTES + [b for b in range(256) if b not in PRINTABLE_BYTES]


def _byte_chars() -> list[str]:
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256+n."""
    printable = PRINTABLE_BYTES
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


BYTE_CHARS = _byte_chars()
_TO_CHAR = {b: c for b, c in enumerate(BYTE_CHARS)}  # str.translate table over latin-1
_TO_BYTES = codecs.charmap_build("".join(BYTE_CHARS))  # a codec: one C call per token
_MERGE_LINES = re.compile(r"(?:\S+ \S+(?:\n|\Z)|\n)*")  # "left right" lines, or empty


def to_unicode(token: bytes) -> str:
    return token.decode("latin-1").translate(_TO_CHAR)


def from_unicode(text: str) -> bytes | None:
    """Bytes of a byte-to-unicode string, or None if it holds a character outside the map."""
    try:
        return codecs.charmap_encode(text, "strict", _TO_BYTES)[0]
    except UnicodeEncodeError:
        return None


class _Excerpt(reprlib.Repr):
    """reprlib's cut repr, bytes cut too (reprlib would repr all 50 MB of them first)."""

    def repr_bytes(self, x: bytes, level: int) -> str:
        s = repr(x[: self.maxstring])
        return s if len(x) <= self.maxstring else f"{s[:-1]}...{s[-1]}"


_EXCERPT = _Excerpt()
_EXCERPT.maxstring = _EXCERPT.maxother = 60
_EXCERPT.maxlong = 40
_EXCERPT.maxlevel = 3
_EXCERPT.maxlist = _EXCERPT.maxtuple = _EXCERPT.maxdict = _EXCERPT.maxset = 4


def excerpt(value: object) -> str:
    """repr of `value` cut to about 60 characters (a nested one: its first items, a few
    levels deep): what an error quotes of a line or entry, which may be megabytes long."""
    text = _EXCERPT.repr(value)
    if isinstance(value, str | bytes) and len(value) > _EXCERPT.maxstring:
        text += f" ({len(value):,} {'characters' if isinstance(value, str) else 'bytes'})"
    return text


def read_file(path: Path, what: str) -> bytes:
    """The bytes of the regular file `path`. A FIFO, a device or a directory is refused
    before any read (reading a FIFO waits for a writer for ever): opened without blocking,
    then checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what}={str(path)!r}: no such file") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: not a regular file")
        return f.read()


def parse_json(text: str, path: Path) -> object:
    """json.loads of a file's text; anything the json module refuses (a syntax error,
    nesting past Python's recursion limit, an integer of over 4,300 digits) a ValueError
    in one short line naming the file."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read") from None
    except ValueError as e:  # int(): "Exceeds the limit (4300 digits) ..."
        raise ValueError(f"{path}: JSON that cannot be read ({excerpt(str(e))})") from None


def serialized(table: list[bytes], indices: np.ndarray | None = None) -> bytes:
    """b"".join(len(t) as 4 bytes little-endian + t) over `table` (or table[indices]), as
    `digest` hashes it: gathered with numpy, no Python object per token."""
    lengths = np.fromiter(map(len, table), dtype=np.int64, count=len(table))
    starts = np.cumsum(lengths) - lengths  # of each token in the joined blob
    blob = np.frombuffer(b"".join(table), dtype=np.uint8)
    if indices is not None:
        indices = np.asarray(indices, dtype=np.int64)
        lengths, starts = lengths[indices], starts[indices]
    # each record: 4 length bytes, then the token's bytes
    record_ends = np.cumsum(lengths + 4)
    out = np.empty(int(record_ends[-1]) if len(lengths) else 0, dtype=np.uint8)
    heads = record_ends - lengths - 4  # where each record starts
    out[heads[:, None] + np.arange(4)] = (
        lengths.astype("<u4").view(np.uint8).reshape(-1, 4)
    )  # [n, 4] length bytes
    # every token byte: its record's start + 4 + its offset in the token
    offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[np.repeat(heads + 4, lengths) + offset] = blob[np.repeat(starts, lengths) + offset]
    return out.tobytes()


def digest(pattern_regex: str, special_tokens: list[str], table: list[bytes], merge_ids) -> str:
    """`Tokenizer.digest()`: sha256 over pattern, special tokens, vocab (in id order) and merges
    (each token length-prefixed; `merge_ids`: (left, right, merged id) rows)."""
    rows = np.asarray(merge_ids, dtype=np.int32).reshape(-1, 3)
    tokens, pairs = serialized(table), serialized(table, rows[:, :2].ravel())
    h = hashlib.sha256(b"packlm-bpe-1\0")
    h.update(pattern_regex.encode("utf-8") + b"\0")
    h.update(json.dumps(special_tokens).encode("utf-8") + b"\0")
    h.update(tokens)
    h.update(pairs)
    return h.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_text(path: Path, what: str) -> str:
    """A regular file's text (`read_file`), which must be UTF-8."""
    try:
        return read_file(path, what).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid UTF-8 at byte offset {e.start}") from None


def read_vocab_json(path: str | os.PathLike, special_tokens: list[str]) -> dict[int, bytes]:
    """{token string: id} -> {id: bytes}; special tokens are kept as their UTF-8 bytes."""
    path = Path(path)
    table = parse_json(read_text(path, "vocab_path"), path)
    if not isinstance(table, dict):
        raise ValueError(f"{path}: expected a JSON object of token -> id")
    specials, encode = set(special_tokens), codecs.charmap_encode
    try:  # the fast path: no Python work per character
        vocab = {
            i: text.encode("utf-8") if text in specials else encode(text, "strict", _TO_BYTES)[0]
            for text, i in table.items()
        }
        if len(vocab) == len(table) and all(type(i) is int for i in vocab):
            return vocab
    except (UnicodeEncodeError, TypeError):
        pass
    return _vocab_naming_the_bad_entry(path, table, specials)


def _split_tokens(texts: list[str]) -> list[bytes]:
    """[from_unicode(t) for t in texts] in a few C calls (UnicodeEncodeError if one is not)."""
    blob = codecs.charmap_encode("".join(texts), "strict", _TO_BYTES)[0]  # a byte per character
    ends = list(itertools.accumulate(map(len, texts)))
    return list(map(blob.__getitem__, map(slice, [0, *ends[:-1]], ends)))


def _vocab_naming_the_bad_entry(path: Path, table: dict, specials: set[str]) -> dict[int, bytes]:
    vocab: dict[int, bytes] = {}
    for text, i in table.items():
        token = text.encode("utf-8") if text in specials else from_unicode(text)
        if token is None or isinstance(i, bool) or not isinstance(i, int):
            raise ValueError(f"{path}: bad entry {excerpt(text)}: {excerpt(i)} "
                             "(not a byte-level token and id)")  # fmt: skip
        if i in vocab:
            raise ValueError(f"{path}: id {excerpt(i)} appears twice")
        vocab[i] = token
    return vocab


def read_merges_txt(path: str | os.PathLike) -> list[tuple[bytes, bytes]]:
    """One merge per line, "left right"; an optional first line "#version: ..."."""
    path = Path(path)
    text = read_text(path, "merges_path")
    body = text.partition("\n")[2] if text.startswith("#version") else text
    if _MERGE_LINES.fullmatch(body):  # the fast path: split and encoded in a few C calls
        try:
            tokens = iter(_split_tokens(body.split()))
            return list(zip(tokens, tokens, strict=False))  # (left, right) pairs
        except UnicodeEncodeError:  # a character outside the byte map: named below
            pass
    return _merges_naming_the_bad_line(path, text.split("\n"))


def _merges_naming_the_bad_line(path: Path, lines: list[str]) -> list[tuple[bytes, bytes]]:
    merges = []
    for lineno, line in enumerate(lines, start=1):
        if not line or (lineno == 1 and line.startswith("#version")):
            continue
        parts = line.rstrip("\r").split(" ")
        tokens = [from_unicode(p) for p in parts]
        if len(parts) != 2 or not all(tokens):
            raise ValueError(
                f"{path}:{lineno}: expected two byte-level tokens, got {excerpt(line)}"
            )
        merges.append((tokens[0], tokens[1]))
    return merges


def vocab_json(vocab: dict[int, bytes], special_ids: dict[str, int]) -> str:
    names = {i: s for s, i in special_ids.items()}
    table = {}
    for i in range(len(vocab)):
        key = names.get(i) or to_unicode(vocab[i])
        if key in table:
            raise ValueError(
                f"vocab: ids {table[key]} and {i} share the name {key!r}; "
                "the GPT-2 format cannot hold both"
            )
        table[key] = i
    return json.dumps(table, ensure_ascii=False, indent=0)


def merges_txt(merges: list[tuple[bytes, bytes]]) -> str:
    lines = [f"{to_unicode(a)} {to_unicode(b)}" for a, b in merges]
    return "\n".join(["#version: 0.2", *lines]) + "\n"


def save_dir(tokenizer, directory: str | os.PathLike) -> None:
    """Config last: it holds the digest that vouches for the other two files."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = {i: tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)}
    write_atomic(directory / VOCAB, vocab_json(vocab, tokenizer.special_token_ids))
    write_atomic(directory / MERGES, merges_txt(tokenizer.merges))
    config = {
        "format": FORMAT,
        "version": VERSION,
        "pattern": tokenizer.pattern,
        "special_tokens": tokenizer.special_tokens,
        "vocab_size": tokenizer.vocab_size,
        "digest": tokenizer.digest(),
        # computed once here so that loading skips it (the digest vouches for the files)
        "tiktoken_ranks": tokenizer._tiktoken_ranks() is not None,
    }
    write_atomic(directory / CONFIG, json.dumps(config, ensure_ascii=False, indent=2) + "\n")


def read_gpt2(cls, vocab_path, merges_path, special_tokens: list[str], pattern: str, engine: str):
    """The tokenizer of GPT-2 style files (an error names a bad entry)."""
    vocab = read_vocab_json(vocab_path, special_tokens)
    merges = read_merges_txt(merges_path)
    return cls(vocab, merges, special_tokens, pattern, engine=engine)


def load_dir(cls, directory: str | os.PathLike, engine: str = "auto"):
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no saved tokenizer directory")
    config_path = directory / CONFIG
    try:
        config = parse_json(read_text(config_path, "config"), config_path)
        if config.get("format") != FORMAT or config.get("version") != VERSION:
            found = f"{excerpt(config.get('format'))} v{excerpt(config.get('version'))}"
            raise ValueError(f"{config_path}: not a packlm tokenizer config (format {found})")
        specials, pattern, fp = config["special_tokens"], config["pattern"], config["digest"]
    except (KeyError, AttributeError, TypeError) as e:
        raise ValueError(f"{config_path}: not a packlm tokenizer config "
                         f"({type(e).__name__}: {excerpt(str(e))})") from None  # fmt: skip
    try:
        tokenizer = read_gpt2(cls, directory / VOCAB, directory / MERGES, specials, pattern, engine)
    except ValueError as e:
        raise ValueError(f"{directory}: {VOCAB}/{MERGES} do not form a tokenizer: {e}") from None
    if tokenizer.digest() != fp:
        raise ValueError(
            f"{directory}: {VOCAB}/{MERGES} do not match the digest in "
            f"{CONFIG} (corrupt or partly written)"
        )
    tokenizer.tiktoken_checked = config.get("tiktoken_ranks") is True
    return tokenizer


def read_tiktoken(path: str | os.PathLike) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """A `.tiktoken` ranks file ("base64(token) rank" per line) -> (vocab, merges).

    tiktoken keeps no merges: each token's merge is recovered as the last step of
    tiktoken's own BPE of its bytes with only lower ranks allowed (how transformers
    converts tiktoken files too)."""
    path = Path(path)
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(read_text(path, "tokenizer.path").splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise ValueError(
                f"{path}:{lineno}: expected 'base64-token rank', got {excerpt(line)}"
            ) from None
    vocab = {i: t for t, i in ranks.items()}
    if len(vocab) != len(ranks) or sorted(vocab) != list(range(len(vocab))):
        raise ValueError(f"{path}: ranks must be 0..{len(ranks) - 1}, each once")
    merges = []
    for i in range(len(vocab)):
        token = vocab[i]
        if len(token) == 1:
            continue
        parts = _rank_bpe(ranks, token, i)
        if len(parts) != 2:
            raise ValueError(
                f"{path}: token {excerpt(token)} (rank {i}) is not a merge of two lower ranks"
            )
        merges.append((parts[0], parts[1]))
    return vocab, merges


def _rank_bpe(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """tiktoken's BPE of `token`'s bytes, merging only into tokens ranked below max_rank."""
    parts = [token[k : k + 1] for k in range(len(token))]
    while len(parts) > 1:
        best, at = max_rank, -1
        for k in range(len(parts) - 1):
            r = ranks.get(parts[k] + parts[k + 1], max_rank)
            if r < best:
                best, at = r, k
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts
