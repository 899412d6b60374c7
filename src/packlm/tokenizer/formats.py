"""Tokenizer files: GPT-2's vocab.json + merges.txt, and packlm's saved directory.

GPT-2 writes each token's bytes as printable characters (its byte-to-unicode map), so
the files are JSON and text. A saved directory is those two files plus
tokenizer_config.json (pattern, special tokens, digest); loading recomputes the
digest, so a corrupt or half-written directory fails loudly instead of encoding
differently. Every file is written to a temporary name and renamed into place.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FORMAT, VERSION = "packlm-bpe", 1
CONFIG, VOCAB, MERGES = "tokenizer_config.json", "vocab.json", "merges.txt"


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
_TO_BYTE = {ord(c): chr(b) for b, c in enumerate(BYTE_CHARS)}


def to_unicode(token: bytes) -> str:
    return token.decode("latin-1").translate(_TO_CHAR)


def from_unicode(text: str) -> bytes | None:
    """Bytes of a byte-to-unicode string, or None if it holds a character outside the map."""
    if any(ord(c) not in _TO_BYTE for c in text):
        return None
    return text.translate(_TO_BYTE).encode("latin-1")


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


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{what}={str(path)!r}: no such file") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid UTF-8 at byte offset {e.start}") from None


def read_vocab_json(path: str | os.PathLike, special_tokens: list[str]) -> dict[int, bytes]:
    """{token string: id} -> {id: bytes}; special tokens are kept as their UTF-8 bytes."""
    path = Path(path)
    try:
        table = json.loads(_read_text(path, "vocab_path"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: expected a JSON object of token -> id")
    vocab: dict[int, bytes] = {}
    for text, i in table.items():
        token = text.encode("utf-8") if text in special_tokens else from_unicode(text)
        if token is None or isinstance(i, bool) or not isinstance(i, int):
            raise ValueError(f"{path}: bad entry {text!r}: {i!r} (not a byte-level token and id)")
        if i in vocab:
            raise ValueError(f"{path}: id {i} appears twice")
        vocab[i] = token
    return vocab


def read_merges_txt(path: str | os.PathLike) -> list[tuple[bytes, bytes]]:
    """One merge per line, "left right"; an optional first line "#version: ..."."""
    path = Path(path)
    merges = []
    for lineno, line in enumerate(_read_text(path, "merges_path").split("\n"), start=1):
        if not line or (lineno == 1 and line.startswith("#version")):
            continue
        parts = line.rstrip("\r").split(" ")
        tokens = [from_unicode(p) for p in parts]
        if len(parts) != 2 or not all(tokens):
            raise ValueError(f"{path}:{lineno}: expected two byte-level tokens, got {line!r}")
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
    }
    write_atomic(directory / CONFIG, json.dumps(config, ensure_ascii=False, indent=2) + "\n")


def load_dir(cls, directory: str | os.PathLike, **kwargs):
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no saved tokenizer directory")
    config_path = directory / CONFIG
    try:
        config = json.loads(_read_text(config_path, "config"))
        if config.get("format") != FORMAT or config.get("version") != VERSION:
            raise ValueError(f"format {config.get('format')!r} v{config.get('version')!r}")
        specials, pattern, fp = config["special_tokens"], config["pattern"], config["digest"]
    except (json.JSONDecodeError, ValueError, KeyError, AttributeError, TypeError) as e:
        raise ValueError(f"{config_path}: not a packlm tokenizer config ({e!r})") from None
    vocab = read_vocab_json(directory / VOCAB, specials)
    merges = read_merges_txt(directory / MERGES)
    try:
        tokenizer = cls(vocab, merges, specials, pattern, **kwargs)
    except ValueError as e:
        raise ValueError(f"{directory}: {VOCAB}/{MERGES} do not form a tokenizer: {e}") from None
    if tokenizer.digest() != fp:
        raise ValueError(
            f"{directory}: {VOCAB}/{MERGES} do not match the digest in "
            f"{CONFIG} (corrupt or partly written)"
        )
    return tokenizer
