"""The tables cache: what loading a tokenizer's files derives, kept for the next load.

Loading files (GPT-2's, a saved directory, a tokenizer.json, a .tiktoken file) derives id tables and checks them (the ids of
every merge, the digest, whether tiktoken gives the same ids): `with_tables` keeps those
results under `<cache_dir>/tokenizers/tables/<key>.npz`, keyed by sha256 of the files' bytes,
the load options and packlm's code that derives them, so a later load of the same bytes only
reads arrays. A missing, corrupt or foreign entry is recomputed, never trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from packlm.cache.entry import mark_used
from packlm.tokenizer import encoder, formats, hf

log = logging.getLogger(__name__)

TABLES_DIR = "tables"  # <cache_dir>/tokenizers/tables/<sha256>.npz: what loading files derived
TABLES_FORMAT = "packlm-tables-1"
ARRAYS = ("tokens", "ends", "byte_ids", "merge_ids")  # the arrays of a tables file
FACTS = ("pattern", "special_token_ids", "digest", "tiktoken")  # and its JSON facts


def with_tables(cls, cache_dir, files: list, options: dict, build: Callable, engine: str):
    """`build()`'s tokenizer; with a `cache_dir`, read from the tables an earlier build from
    files of the same bytes and options left there (then kept for the next load)."""
    contents = None if cache_dir is None else _contents(files, cls)
    if contents is None:  # no cache, or a file cannot be read: build() names it
        return build()
    key = _tables_key(contents, options)
    path = Path(cache_dir) / TABLES_DIR / f"{key}.npz"
    tables = _read_tables(path)
    if tables is not None:
        mark_used(path)
        return cls._from_tables(tables, engine)
    tokenizer = build()
    if _contents(files, cls) == contents:  # no file changed while build() read it
        _write_tables(path, tokenizer._tables())
    return tokenizer


def _contents(files: list, cls) -> list[bytes] | None:
    """The bytes of `files` and of packlm's code that derives the tables (a packlm that
    derives them differently never reads these; the pattern is not in them: every load
    resolves it again), or None when one cannot be read."""
    code = [encoder.__file__, formats.__file__, hf.__file__, __file__,
            sys.modules[cls.__module__].__file__]  # fmt: skip
    try:
        return [formats.read_file(Path(path), "file") for path in [*files, *code]]
    except (OSError, ValueError):  # a FIFO or a directory is refused, not read
        return None


def _tables_key(contents: list[bytes], options: dict) -> str:
    h = hashlib.sha256(f"{TABLES_FORMAT}\0{json.dumps(options)}\0".encode())
    for data in contents:
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _checksum(facts: dict, arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256(json.dumps(facts, sort_keys=True).encode())
    for a in arrays:
        h.update(np.ascontiguousarray(a))  # its bytes, not copied
    return h.hexdigest()


def _write_tables(path: Path, tables: dict) -> None:
    """Arrays + their sha256 and the small facts in JSON; a temporary name, then renamed."""
    table = tables["table"]
    blob = b"".join(table)
    ends = np.cumsum(np.fromiter(map(len, table), dtype=np.int64, count=len(table)))
    arrays = [
        np.frombuffer(blob, dtype=np.uint8),
        ends,
        np.array(tables["byte_ids"], dtype=np.int32),
        np.array(tables["merge_ids"], dtype=np.int32).reshape(-1, 3),
    ]
    facts = {k: tables[k] for k in FACTS}
    meta = {"format": TABLES_FORMAT, "sha256": _checksum(facts, arrays), "facts": facts}
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = io.BytesIO()  # then one write: zipfile's many small writes and seeks cost more
        np.savez(data, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
                 **dict(zip(ARRAYS, arrays, strict=True)))  # fmt: skip
        with open(tmp, "wb") as f:
            f.write(data.getbuffer())
        os.replace(tmp, path)
    except OSError as e:  # only a cache: the tokenizer itself is fine
        log.warning("cannot keep the tokenizer tables in %s: %s", path, e)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _read_tables(path: Path) -> dict | None:
    """The tables at `path`, or None when absent or not exactly what was written."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes())
            arrays = [z[k] for k in ARRAYS]
        facts = meta["facts"]
        if meta["format"] != TABLES_FORMAT or meta["sha256"] != _checksum(facts, arrays):
            raise ValueError("checksum or format mismatch")
        tokens, ends, byte_ids, merge_ids = arrays
        blob, starts = tokens.tobytes(), np.concatenate([[0], ends[:-1]])
        if ends.size and (ends[-1] != len(blob) or np.any(ends < starts)):
            raise ValueError("the token ends do not cut the tokens' bytes")
        table = list(map(blob.__getitem__, map(slice, starts.tolist(), ends.tolist())))
        return {"table": table, "byte_ids": byte_ids.tolist(), "merge_ids": merge_ids, **facts}
    except (FileNotFoundError, NotADirectoryError):
        return None
    except Exception as e:  # any unreadable entry is recomputed, never trusted
        log.warning("recomputing the tokenizer tables %s (%s: %s)", path, type(e).__name__, e)
        return None
