"""Pre-token counting for training: stream the input, count in worker processes.

Training needs only the table pre-token -> count, so the input is never held whole:
a file is read in blocks, decoded with byte offsets for errors, and cut into pieces at
places where the cut does not change pre-tokenization (see `stream_cut`); documents
from an iterator are batched. Worker processes each keep one Counter and return it
once at the end, so the parent merges only a handful of tables.

Workers live by `packlm.runtime.workers`' rules: they die with their parent, and a worker that dies
(the OOM killer, a kill) is an error naming the phase and the signal within a second, never
a hang.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from itertools import chain
from pathlib import Path

import numpy as np
import regex

from packlm.runtime.workers import (
    WorkerDied,
    death_message,
    die_with_parent,
    exited,
    leave_ctrl_c_to_the_parent,
    start_context,
)
from packlm.tokenizer.pretokenize import (
    GPT2_PATTERN,
    MAX_PRETOKEN_CHARS,
    PIECE_CHARS,
    piece_spans,
    special_regex,
    split_special,
    stream_cut,
)
from packlm.tokenizer.pretokenize import (
    count_pretokens as count_with_regex,
)

try:  # GPT-2's pre-tokenizer in C (_count.c), built with the merge loop by setup.py
    from packlm.tokenizer.training._bpe import count_gpt2
except ImportError:  # pragma: no cover - no compiler, or an _bpe built from older sources
    count_gpt2 = None

log = logging.getLogger(__name__)

BATCH_CHARS = 1 << 18  # text per task: small enough that a worker's findall list stays small
READ_BYTES = 1 << 18  # a file is read (and cut into tasks) in blocks of this size


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


def _batches(texts: Iterable[str], pattern: str, specials, cuts: list[int]) -> Iterator[list[str]]:
    """Texts grouped into tasks of about BATCH_CHARS; a longer text is cut into pieces that
    pre-tokenize as the whole (`piece_spans`, between its special tokens), so no task, and no
    worker's findall list, grows with the document. A pre-token over MAX_PRETOKEN_CHARS is
    counted in parts: `cuts[0]` counts those cuts (the pairs across them are not counted)."""
    batch, chars = [], 0
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"documents: expected str, got {type(text).__name__}")
        for piece in _pieces(text, pattern, specials, cuts) if len(text) > BATCH_CHARS else (text,):
            batch.append(piece)
            chars += len(piece)
            if chars >= BATCH_CHARS:
                yield batch
                batch, chars = [], 0
    if batch:
        yield batch


def _pieces(text: str, pattern: str, specials, cuts: list[int]) -> Iterator[str]:
    for part, is_special in split_special(text, specials):
        if is_special:
            continue  # special tokens are not counted
        for start, end, exact in piece_spans(part, pattern, min(BATCH_CHARS, PIECE_CHARS)):
            cuts[0] += not exact
            yield part[start:end]


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


PHASE = "pre-tokenizing (tokenizer training)"


@cache
def regex_classes() -> bytes:
    """One byte per code point: 1 if `regex` puts it in \\p{L}, 2 in \\p{N}, 4 in \\s (the
    table of _count.c's scanner), found by running those classes over every code point
    (about 25 ms), so the scanner follows the installed `regex`'s Unicode version."""
    everything = np.arange(0x110000, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    table = np.zeros(0x110000, np.uint8)
    for flag, cls in ((1, r"\p{L}+"), (2, r"\p{N}+"), (4, r"\s+")):
        for m in regex.finditer(cls, everything):
            table[m.start() : m.end()] = flag
    return table.tobytes()


def count_pretokens(texts: Iterable[str], pattern: str, specials, into: Counter[str]) -> None:
    """Add the pre-tokens of `texts` (documents, split at the special tokens) to `into`:
    GPT-2's pattern through the C scanner when it is built (the same counts), any other
    through `regex`."""
    if pattern != GPT2_PATTERN or count_gpt2 is None:
        count_with_regex(texts, regex.compile(pattern), specials, into=into)
        return
    classes = regex_classes()
    for text in texts:
        for piece, is_special in split_special(text, specials):
            if not is_special:
                count_gpt2(piece, classes, into)


def _worker(pattern: str, special_tokens: list[str], tasks, results, parent: int) -> None:
    die_with_parent(parent)
    leave_ctrl_c_to_the_parent()
    try:
        specials = special_regex(special_tokens)
        counts: Counter[str] = Counter()
        while (texts := tasks.get()) is not None:
            count_pretokens(texts, pattern, specials, into=counts)
        results.put(counts)
    except BaseException as e:  # report it rather than leave the parent waiting
        results.put(RuntimeError(f"pre-tokenizer worker failed: {e!r}"))


def _check_alive(procs, results, finished_ok: bool) -> None:
    """Raise if a worker ended early (with its own error when it sent one)."""
    for p in procs:
        if not exited(p) or (finished_ok and p.exitcode in (0, None)):
            continue
        try:
            error = results.get(timeout=1.0)
        except queue.Empty:
            error = None
        if isinstance(error, BaseException):
            raise error
        raise WorkerDied(death_message(PHASE, p.pid, p.exitcode))


def _put(tasks, item, procs, results) -> None:
    _check_alive(procs, results, finished_ok=False)  # a dead worker is noticed at once
    while True:
        try:
            return tasks.put(item, timeout=0.5)
        except queue.Full:
            _check_alive(procs, results, finished_ok=False)  # no worker may end while fed


def _get(results, procs) -> Counter[str]:
    while True:
        try:
            item = results.get(timeout=0.5)
        except queue.Empty:
            _check_alive(procs, results, finished_ok=True)
            continue
        if isinstance(item, BaseException):
            raise item
        return item


def count_parallel(
    texts: Iterable[str],
    pattern: str,
    special_tokens: list[str],
    num_workers: int,
    progress: Callable[[int], object] | None = None,
) -> Counter[str]:
    """Pre-token counts of `texts`; processes start only if there is more than one batch
    (and not inside a daemon process, which may not have children). `progress` gets the
    UTF-8 bytes of each batch as it is handed out."""
    cuts = [0]
    batches = _batches(texts, pattern, special_regex(special_tokens), cuts)
    counts = _count(batches, pattern, special_tokens, num_workers, progress)
    if cuts[0]:
        log.warning("%d cuts inside pre-tokens longer than %d characters: each such pre-token was "
                    "counted in parts (the pairs across the cuts are left out of the merge "
                    "statistics)", cuts[0], MAX_PRETOKEN_CHARS)  # fmt: skip
    return counts


def _count(batches, pattern, special_tokens, num_workers, progress) -> Counter[str]:
    head = [b for b in (next(batches, None), next(batches, None)) if b is not None]
    if num_workers <= 1 or len(head) < 2 or multiprocessing.current_process().daemon:
        specials = special_regex(special_tokens)
        counts: Counter[str] = Counter()
        for batch in chain(head, batches):
            count_pretokens(batch, pattern, specials, into=counts)
            if progress is not None:
                progress(sum(map(utf8_len, batch)))
        return counts

    ctx = start_context()
    tasks, results = ctx.Queue(maxsize=2 * num_workers), ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker, args=(pattern, special_tokens, tasks, results, os.getpid()), daemon=True
        )
        for _ in range(num_workers)
    ]
    for p in procs:
        p.start()
    finished = False
    try:
        for batch in chain(head, batches):
            _put(tasks, batch, procs, results)
            if progress is not None:
                progress(sum(map(utf8_len, batch)))
        for _ in procs:
            _put(tasks, None, procs, results)
        parts = sorted((_get(results, procs) for _ in procs), key=len, reverse=True)
        finished = True
    finally:
        if not finished:  # tasks still queued for workers now gone: exit must not wait to send them
            tasks.cancel_join_thread()
        for p in procs:
            if not finished:
                p.kill()
            p.join()
    counts = parts[0]
    for part in parts[1:]:
        counts.update(part)
    return counts
