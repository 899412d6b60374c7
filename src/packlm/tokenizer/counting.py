"""Pre-token counting for training: stream the input, count in worker processes.

Training needs only the table pre-token -> count, so the input is never held whole:
a file is read in blocks, decoded with byte offsets for errors, and cut into pieces at
places where the cut does not change pre-tokenization (see `stream_cut`); documents
from an iterator are batched. Worker processes each keep one Counter and return it
once at the end, so the parent merges only a handful of tables.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import regex

from packlm.tokenizer.pretokenize import count_pretokens, special_regex, stream_cut

BATCH_CHARS = 1 << 18  # text per task: small enough that a worker's findall list stays small
READ_BYTES = 1 << 20


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _utf8_complete(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): does its character fit?
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return len(data) if need <= back else len(data) - back
    return len(data)  # only continuation bytes: let the decoder report them


def _decode(data: bytes, path: Path, offset: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path}: not valid UTF-8 at byte offset {offset + e.start} ({e.reason})"
        ) from None


def iter_file_pieces(path: str | os.PathLike, special_tokens: list[str]) -> Iterator[str]:
    """The text of `path` in pieces that pre-tokenize exactly as the whole file does."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"input_path={str(path)!r}: no such file")
    if path.stat().st_size == 0:
        raise ValueError(f"input_path={str(path)!r}: the file is empty")
    specials = special_regex(special_tokens)
    longest = max(map(len, special_tokens), default=0)
    carry, pending, offset = "", b"", 0
    with open(path, "rb") as f:
        while block := f.read(READ_BYTES):
            data = pending + block
            end = _utf8_complete(data)
            carry += _decode(data[:end], path, offset)
            pending, offset = data[end:], offset + end
            cut = stream_cut(carry, specials, longest)
            if cut:
                yield carry[:cut]
                carry = carry[cut:]
    if pending:
        _decode(pending, path, offset)  # a character cut off by the end of the file
        raise ValueError(f"{path}: not valid UTF-8 at byte offset {offset} (truncated character)")
    if carry:
        yield carry


def _batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    batch, chars = [], 0
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"documents: expected str, got {type(text).__name__}")
        batch.append(text)
        chars += len(text)
        if chars >= size:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _worker(pattern: str, special_tokens: list[str], tasks, results) -> None:
    try:
        compiled, specials = regex.compile(pattern), special_regex(special_tokens)
        counts: Counter[str] = Counter()
        while (texts := tasks.get()) is not None:
            counts += count_pretokens(texts, compiled, specials) if not counts else Counter()
            if counts and texts:
                counts.update(count_pretokens(texts, compiled, specials))
        results.put(counts)
    except BaseException as e:  # report instead of leaving the parent waiting
        results.put(RuntimeError(f"pre-tokenizer worker failed: {e!r}"))
