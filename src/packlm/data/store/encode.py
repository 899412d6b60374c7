"""Texts -> token ids on every core, results in submission order, bounded work in flight.

`Pool.imap` would read the whole input ahead of the workers (memory grows with the
corpus), so chunks are submitted one by one and the oldest is collected once
`max_in_flight` are pending: memory stays at a few chunks whatever the corpus size.
The tokenizer is sent once per worker (the pool initializer), never per chunk.

Workers die with their parent (`die_with_parent`) and ignore Ctrl-C (the parent handles
it and stops them). A `ProcessPoolExecutor` is used, not `multiprocessing.Pool`: a Pool
replaces a worker killed mid-task (the OOM killer) and waits for its result for ever;
the executor fails every pending result, and `WorkerDied` names the phase and the signal.
A worker writes its ids to a file in `spill_dir` and sends back only the file name: a
worker killed while sending a large result through the pipe would leave half a message
there, on which the executor's reader thread blocks for ever; a short message is written
atomically (pipe writes up to 4 KiB are).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
import signal
import tempfile
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np

from packlm.data.store.layout import write_npy
from packlm.runtime.workers import (
    WorkerDied,
    death_message,
    die_with_parent,
    leave_ctrl_c_to_the_parent,
)
from packlm.tokenizer.chat import MARKUP, ChatFormat
from packlm.tokenizer.pretokenize import (
    MAX_PRETOKEN_CHARS,
    PIECE_CHARS,
    piece_spans,
    split_pretoken,
)

PHASE = "encoding the token store"

_tokenizer: Any = None
_eos_id = 0
_dtype = np.dtype(np.uint32)
_chat: ChatFormat | None = None


def available_cores() -> int:
    """Cores this process may run on (respects taskset / cgroup affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _init(
    tokenizer: Any, eos_id: int, dtype: str, chat: ChatFormat | None = None,
    parent: int | None = None,
) -> None:  # fmt: skip
    global _tokenizer, _eos_id, _dtype, _chat
    if parent is not None:  # a worker process
        die_with_parent(parent)
        leave_ctrl_c_to_the_parent()
    _tokenizer, _eos_id, _dtype, _chat = tokenizer, eos_id, np.dtype(dtype), chat


Item = str | tuple
"""What the encoder takes: a text, or a conversation's (role, content) turns."""


def encode_texts(
    texts: list[Item], ends: list[bool] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(ids of all texts back to back, int64 length per text, uint8 role code per id or None):
    each text that ends a document (`ends[i]`, all by default) is followed by EOS, counted in
    its length; the others are pieces of a longer document, cut where the cut changes no id
    (`piece_spans`). A conversation (a tuple of turns) is rendered by the chat format
    (`packlm.tokenizer.chat`), its codes beside its ids; with one in the list, every id gets
    a code (plain text: TEXT), else the codes are None.

    Special-token strings inside a text are encoded as ordinary text.
    """
    encode = _tokenizer.encode_ordinary
    flat: list[int] = []
    codes: bytearray | None = None
    lengths = np.empty(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        end = ends is None or ends[i]
        if isinstance(text, str):
            ids = encode(text)
            if codes is not None:
                codes += bytes(len(ids) + end)  # TEXT = 0
        else:
            ids, own = _chat.render(text, encode)
            if codes is None:
                codes = bytearray(len(flat))
            codes += own
            if end:
                codes.append(MARKUP)  # the conversation's EOS
        flat += ids
        if end:
            flat.append(_eos_id)
        lengths[i] = len(ids) + end
    ids = np.fromiter(flat, dtype=_dtype, count=len(flat))  # 2x faster than np.array
    return ids, lengths, None if codes is None else np.frombuffer(codes, dtype=np.uint8)


def encode_to_file(texts: list[Item], ends: list[bool] | None, path: str) -> str:
    """In a worker: `encode_texts` into the file `path` (lengths, ids, then the role codes:
    empty when None); returns `path`."""
    ids, lengths, codes = encode_texts(texts, ends)
    with open(path, "wb") as f:
        write_npy(f, lengths)
        write_npy(f, ids)
        write_npy(f, np.zeros(0, np.uint8) if codes is None else codes)
    return path


class DocumentPieces:
    """What the parent needs of the tokenizer: where to cut a long document, bytes per id."""

    def __init__(self, tokenizer: Any):
        self.tokenizer, self.pattern = tokenizer, tokenizer.pattern_regex
        self.byte_lengths = tokenizer.token_byte_lengths()  # UTF-8 bytes per id, specials 0
        self.size, self.max_token = PIECE_CHARS, MAX_PRETOKEN_CHARS  # read here: tests lower them
        self._pairs: np.ndarray | None = None

    def spans(self, text: str) -> tuple[list[tuple[int, int]], int]:
        """(start, end) pieces of `text` that encode to its ids (`piece_spans`), and how many
        cuts inside a pre-token over MAX_PRETOKEN_CHARS found no place no merge crosses."""
        split = self._split_token
        spans = list(piece_spans(text, self.pattern, self.size, self.max_token, split))
        return [(s, e) for s, e, _ in spans], sum(not exact for *_, exact in spans)

    def _split_token(self, text: str, start: int, end: int, max_token: int):
        if self._pairs is None:
            self._pairs = joined_pairs(self.tokenizer)
        return split_pretoken(text, start, end, max_token, self._pairs)


def joined_pairs(tokenizer: Any) -> np.ndarray:
    """bool[65536]: byte pair a*256+b occurs inside some token of the vocabulary, so a merge
    may join a and b; where it does not, a long pre-token can be cut without changing an id
    (`packlm.tokenizer.pretokenize.split_pretoken`)."""
    specials = set(tokenizer.special_token_ids.values())
    tokens = [tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size) if i not in specials]
    data = np.frombuffer(b"".join(tokens), dtype=np.uint8).astype(np.int64)
    codes = data[:-1] * 256 + data[1:]
    inside = np.ones(len(codes), dtype=bool)
    ends = np.cumsum([len(t) for t in tokens])[:-1]
    inside[ends[ends > 0] - 1] = False  # a pair across two tokens of the list is no pair
    table = np.zeros(65536, dtype=bool)
    table[codes[inside]] = True
    return table


def _read_result(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    with open(path, "rb") as f:
        lengths = np.load(f)
        ids = np.load(f)
        codes = np.load(f)
    os.unlink(path)
    return ids, lengths, codes if len(codes) else None


class OrderedEncoder:
    """`submit(texts, tag)` returns the results now complete, oldest first, as (tag, ids,
    lengths, role codes or None): `encode_texts`'s.

    With `workers=0` everything runs in this process (small corpora, where starting
    processes costs more than it saves). `spill_dir` (created, and removed by `close`)
    holds the results in flight; a killed build's is removed with its temporary entry.
    """

    def __init__(
        self,
        tokenizer: Any,
        eos_id: int,
        dtype: np.dtype,
        workers: int,
        spill_dir: str | os.PathLike | None = None,
        chat: ChatFormat | None = None,
    ):
        self.workers = workers
        self._spill: Path | None = None
        self._names = itertools.count()
        self._pending: deque[tuple[Any, Any]] = deque()
        self._max_in_flight = 2 * workers + 1
        args = (tokenizer, eos_id, np.dtype(dtype).name, chat)
        self._procs: dict[int, Any] = {}  # every worker started, to name the one that died
        if workers > 0:
            self._spill = Path(spill_dir or tempfile.mkdtemp(prefix="packlm-encode-"))
            self._spill.mkdir(parents=True, exist_ok=True)
            self._pool = ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context(),
                initializer=_init,
                initargs=(*args, os.getpid()),
            )
        else:
            self._pool = None
            _init(*args)

    def submit(
        self, texts: list[str], tag: Any, ends: list[bool] | None = None
    ) -> Iterator[tuple[Any, np.ndarray, np.ndarray, np.ndarray | None]]:
        if self._pool is None:
            yield (tag, *encode_texts(texts, ends))
            return
        try:
            path = str(self._spill / f"{next(self._names)}.npy")
            future = self._pool.submit(encode_to_file, texts, ends, path)
        except BrokenProcessPool:
            raise self._died() from None
        self._procs.update(self._pool._processes or {})
        self._pending.append((tag, future))
        while len(self._pending) >= self._max_in_flight or (
            self._pending and self._pending[0][1].done()
        ):
            yield self._collect()

    def drain(self) -> Iterator[tuple[Any, np.ndarray, np.ndarray, np.ndarray | None]]:
        while self._pending:
            yield self._collect()

    def _collect(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray | None]:
        tag, future = self._pending.popleft()
        try:
            return (tag, *_read_result(future.result()))
        except BrokenProcessPool:
            raise self._died() from None

    def _died(self) -> WorkerDied:
        """The worker that ended first: a killed one rather than one the pool then stopped."""
        for p in self._procs.values():
            p.join(timeout=1.0)
        ended = [p for p in self._procs.values() if p.exitcode not in (None, 0)]
        ended.sort(key=lambda p: p.exitcode == -signal.SIGTERM)
        victim = ended[0] if ended else None
        return WorkerDied(
            death_message(PHASE, victim and victim.pid, victim and victim.exitcode)
            + "; the partial store is removed, the next run rebuilds it"
        )

    def close(self, ok: bool = True) -> None:
        if self._pool is not None:
            if not ok:  # a failed build: stop the tasks in flight rather than wait for them
                for p in self._procs.values():
                    if p.is_alive():
                        p.kill()
            self._pool.shutdown(wait=True, cancel_futures=not ok)
            self._pool = None
            shutil.rmtree(self._spill, ignore_errors=True)

    def __enter__(self) -> OrderedEncoder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(ok=exc_type is None)
