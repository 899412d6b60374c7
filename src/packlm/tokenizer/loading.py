"""Tokenizer files -> a tokenizer's tables, and the tiktoken check, in a few C calls.

`_load.c` (built with the merge loop by `pip install`; optional) parses vocab.json and
merges.txt (or a tokenizer.json's vocab and merges, or a .tiktoken file), finds the ids of
every merge and runs the tiktoken check of `encoder.tiktoken_ranks` without a Python object
per merge. It takes only the common case: anything else (the extension not built, an escape
it does not know, a duplicate id or token, a gap, a character outside GPT-2's byte map, a
merge not in the vocab) returns None, and the caller takes the Python path (formats.py,
hf.py, `encoder.id_tables`), which gives the same tables or names the bad entry.
"""

from __future__ import annotations

import logging
import os

import numpy as np

try:
    from packlm.tokenizer import _load
except ImportError:  # pragma: no cover - exercised only without a compiler
    _load = None

FUNCTIONS = ("vocab_json", "vocab_dict", "merge_ids", "tiktoken_ranks", "serialize", "split",
             "tiktoken_file", "json_model_spans", "json_merges")  # fmt: skip
if _load is not None and not all(hasattr(_load, f) for f in FUNCTIONS):  # pragma: no cover
    logging.getLogger(__name__).warning(
        "%s was built from older sources (rebuild: pip install -e .); loading tokenizers "
        "takes the Python path", _load.__file__)  # fmt: skip
    _load = None


def gpt2_tables(vocab_path: str | os.PathLike, merges_path: str | os.PathLike,
                special_tokens: list[str]) -> dict | None:  # fmt: skip
    """What `Tokenizer._from_tables` takes (no digest, no verdict yet) from GPT-2's files,
    or None: the Python path then reads them (and names what is wrong)."""
    if _load is None:
        return None
    try:
        with open(vocab_path, "rb") as f:
            vocab = f.read()
        with open(merges_path, "rb") as f:
            merges = f.read()
    except OSError:  # the Python path names the file
        return None
    if merges.startswith(b"#version"):
        header, _, merges = merges.partition(b"\n")
        try:
            header.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return byte_level_tables(vocab, merges, special_tokens)


def byte_level_tables(vocab: bytes | memoryview | dict, merges: bytes, special_tokens: list[str],
                      literal: list[str] | None = None, added=()) -> dict | None:  # fmt: skip
    """`gpt2_tables` of a vocab.json's bytes (or a tokenizer.json's model.vocab, as bytes or a
    {text: id} dict; the texts of `literal`, default the special tokens, as UTF-8, the rest
    in GPT-2's byte map) and merges.txt's lines, or None. `added`: (id, text) tokens taking
    their id where the vocab has none (a tokenizer.json's added_tokens), as
    `hf.read_tokenizer_json` + `encoder.id_tables` place them."""
    if _load is None:
        return None
    literal = special_tokens if literal is None else literal
    if not all(type(i) is int and type(text) is str for i, text in added):
        return None
    try:  # a lone surrogate (json keeps one) has no UTF-8: the Python path names its entry
        "".join([*special_tokens, *literal, *(text for _, text in added)]).encode("utf-8")
    except UnicodeEncodeError:
        return None
    if isinstance(vocab, dict):
        table = _load.vocab_dict(vocab, tuple(literal))
    else:
        table = _load.vocab_json(vocab, tuple(s.encode("utf-8") for s in literal))
    if table is None:
        return None
    for i, text in sorted(added, key=lambda t: t[0]):  # stable: the first of an id stays
        if i == len(table):
            table.append(text.encode("utf-8"))
        elif i > len(table) or i < 0:  # a gap or a negative id: the Python path names it
            return None
    specials = {}
    for s in special_tokens:  # as `encoder.id_tables` finds them (no token is there twice)
        token = s.encode("utf-8")
        try:
            specials[s] = table.index(token)
        except ValueError:
            specials[s] = len(table)
            table.append(token)
    found = _load.merge_ids(table, frozenset(specials.values()), merges)
    if found is None:
        return None
    byte_ids, rows = found
    merge_ids = np.frombuffer(rows, dtype=np.int32).reshape(-1, 3)
    return {"table": table, "byte_ids": byte_ids, "merge_ids": merge_ids,
            "special_token_ids": specials}  # fmt: skip


def cut_tokenizer_json(data: bytes) -> tuple[bytes, memoryview, bytes] | None:
    """A tokenizer.json's model.vocab and model.merges cut out in C: (the file with them as {}
    and [], for json.loads; the vocab's JSON, for `byte_level_tables`; the merges as
    merges.txt's lines), or None where C does not find each once or reads the merges
    otherwise than the Python path would."""
    if _load is None:
        return None
    spans = _load.json_model_spans(data)
    if spans is None:
        return None
    vocab_start, vocab_end, merges_start, merges_end = spans
    view = memoryview(data)
    merges = _load.json_merges(view[merges_start:merges_end])
    if merges is None:
        return None
    (start, end, fill), (start2, end2, fill2) = sorted(  # in the file's order
        [(vocab_start, vocab_end, b"{}"), (merges_start, merges_end, b"[]")]
    )
    rest = b"".join([data[:start], fill, data[end:start2], fill2, data[end2:]])
    return rest, view[vocab_start:vocab_end], merges


def tiktoken_tables(path: str | os.PathLike, special_tokens: list[str]) -> dict | None:
    """What `Tokenizer._from_tables` takes from a .tiktoken ranks file, each merge recovered
    in C as `formats.read_tiktoken` does it, with tiktoken's ranks where they pass the check
    (`encoder.tiktoken_ranks`; {} where none can); None for anything unusual (or a special
    token already among the ranks): the Python path then reads it, or names what is wrong."""
    if _load is None:
        return None
    try:
        with open(path, "rb") as f:
            found = _load.tiktoken_file(f.read())
    except OSError:
        return None
    if found is None:
        return None
    table, byte_ids, rows, ranks = found
    specials = {s: len(table) + k for k, s in enumerate(special_tokens)}
    special_bytes = [s.encode("utf-8") for s in special_tokens]
    among = ranks or table  # the dict where there is one: no scan of 50,000 tokens
    if any(token in among for token in special_bytes):
        return None
    table += special_bytes
    return {"table": table, "byte_ids": byte_ids, "special_token_ids": specials,
            "merge_ids": np.frombuffer(rows, dtype=np.int32).reshape(-1, 3),
            "tiktoken_ranks": ranks or {}}  # fmt: skip


def tiktoken_ranks(table: list[bytes], byte_ids: list[int], merge_ids, check_bpe: bool):
    """`encoder.tiktoken_ranks` in C: the ranks (token bytes -> id), False where no ranks
    give merge-order BPE's ids (`check_bpe`: checking that every merged token encodes to
    itself too), None when C is not built."""
    if _load is None:
        return None
    rows = np.ascontiguousarray(merge_ids, dtype=np.int32).reshape(-1, 3)
    ranks = _load.tiktoken_ranks(table, byte_ids, rows.tobytes(), check_bpe)
    return False if ranks is None else ranks


def serialized(table: list[bytes], indices: np.ndarray | None = None) -> bytes | None:
    """b"".join(len(t) as 4 bytes little-endian + t) over `table` (or table[indices]), as
    `formats.digest` hashes it; None when C is not built."""
    if _load is None:
        return None
    if indices is None:
        return _load.serialize(table)
    return _load.serialize(table, np.ascontiguousarray(indices, dtype=np.int32).tobytes())


def split(blob: bytes, ends: np.ndarray) -> list[bytes] | None:
    """[blob[a:b] for the (a, b) that `ends` (rising; the last is len(blob)) cut], in one C
    call; ValueError where they do not cut it so; None when C is not built."""
    if _load is None:
        return None
    return _load.split(blob, np.ascontiguousarray(ends, dtype=np.int64).tobytes())


def join(table: list[bytes]) -> tuple[bytes, np.ndarray]:
    """(the tokens joined, the int64 end of each): `split`'s inverse, in C when built."""
    if _load is None:
        ends = np.cumsum(np.fromiter(map(len, table), dtype=np.int64, count=len(table)))
        return b"".join(table), ends
    blob, ends = _load.join(table)
    return blob, np.frombuffer(ends, dtype=np.int64)
