"""Texts -> token ids on every core, results in submission order, bounded work in flight.

`Pool.imap` would read the whole input ahead of the workers (memory grows with the
corpus), so chunks are submitted one by one and the oldest is collected once
`max_in_flight` are pending: memory stays at a few chunks whatever the corpus size.
The tokenizer is sent once per worker (the pool initializer), never per chunk.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

_tokenizer: Any = None
_eos_id = 0
_dtype = np.dtype(np.uint32)


def available_cores() -> int:
    """Cores this process may run on (respects taskset / cgroup affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _init(tokenizer: Any, eos_id: int, dtype: str) -> None:
    global _tokenizer, _eos_id, _dtype
    _tokenizer, _eos_id, _dtype = tokenizer, eos_id, np.dtype(dtype)


def encode_texts(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ids of all texts back to back, each followed by EOS; int64 length per text, EOS included).

    Special-token strings inside a text are encoded as ordinary text.
    """
    encode = _tokenizer.encode_ordinary
    flat: list[int] = []
    lengths = np.empty(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        ids = encode(text)
        flat += ids
        flat.append(_eos_id)
        lengths[i] = len(ids) + 1
    return np.fromiter(
        flat, dtype=_dtype, count=len(flat)
    ), lengths  # 2x faster than np.array(list)


class OrderedEncoder:
    """`submit(texts, tag)` returns the results now complete, oldest first, as (tag, ids, lengths).

    With `workers=0` everything runs in this process (small corpora, where starting
    processes costs more than it saves).
    """

    def __init__(self, tokenizer: Any, eos_id: int, dtype: np.dtype, workers: int):
        self.workers = workers
        self._pending: deque[tuple[Any, Any]] = deque()
        self._max_in_flight = 2 * workers + 1
        args = (tokenizer, eos_id, np.dtype(dtype).name)
        if workers > 0:
            self._pool = multiprocessing.get_context().Pool(
                workers, initializer=_init, initargs=args
            )
        else:
            self._pool = None
            _init(*args)

    def submit(self, texts: list[str], tag: Any) -> Iterator[tuple[Any, np.ndarray, np.ndarray]]:
        if self._pool is None:
            yield (tag, *encode_texts(texts))
            return
        self._pending.append((tag, self._pool.apply_async(encode_texts, (texts,))))
        while len(self._pending) >= self._max_in_flight or (
            self._pending and self._pending[0][1].ready()
        ):
            tag, result = self._pending.popleft()
            yield (tag, *result.get())

    def drain(self) -> Iterator[tuple[Any, np.ndarray, np.ndarray]]:
        while self._pending:
            tag, result = self._pending.popleft()
            yield (tag, *result.get())

    def close(self, ok: bool = True) -> None:
        if self._pool is not None:
            if ok:
                self._pool.close()
            else:
                self._pool.terminate()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> OrderedEncoder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(ok=exc_type is None)
