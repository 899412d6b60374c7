"""Where windows start: every rule of the sliding window in one place.

A sequence of `length` tokens (a document or a pack) is read by windows of T+1 = window+1
tokens (T inputs, T next-token targets):

1. **Offset**: the first window starts at `offset`, drawn uniformly from
   [0, min(stride-1, length-(T+1))] for every sequence and every epoch (`random_offset`),
   or 0.
2. **Grid**: full windows start at offset, offset+stride, offset+2*stride, ... while they
   fit: `full = (length - (T+1) - offset) // stride + 1`.
3. **Tail**: the end no full window reaches gets one more window (`cover`: aligned to the
   end; `pad`: the next grid start, padded) or none (`drop`). It exists only when the last
   full window ends before the sequence does and the next grid start is still inside it
   (with stride > T+1 the end can fall in a gap).
4. **Short**: a sequence shorter than T+1 is one padded window from 0.

`sequence_windows` applies rules 2-4 once per sequence; counting (`SequenceWindows.count`)
and placement (`window_start`) both read its result, so they cannot disagree.
Validation windows are the special case stride = window, no offset, pad tail.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from packlm.config.data import DataConfig
from packlm.data.epoch.indexing import index_dtype


class SequenceWindows(NamedTuple):
    """The windows of each sequence of a batch of sequences (arrays [n])."""

    full: np.ndarray  # int64: full windows on the grid offset + k * stride
    tail: np.ndarray  # bool: one tail window after them (cover or pad)
    short: np.ndarray  # bool: shorter than T+1, one padded window from 0

    @property
    def count(self) -> np.ndarray:
        """int64 [n]: samples of each sequence."""
        return self.full + self.tail + self.short


def sequence_windows(
    length: np.ndarray, offset: np.ndarray | int, window: int, stride: int, tail: str
) -> SequenceWindows:
    """Rules 2-4 of the module doc for sequences of `length` whose grid starts at `offset`."""
    t1 = window + 1
    length = np.asarray(length, dtype=np.int64)
    fits = length >= t1
    full = np.where(fits, (length - t1 - offset) // stride + 1, 0)  # [n]
    last_end = offset + (full - 1) * stride + t1
    next_start = offset + full * stride
    has_tail = fits & (last_end < length) & (next_start < length) & (tail != "drop")
    return SequenceWindows(full, has_tail, ~fits & (length > 0))


def window_start(
    k: np.ndarray,
    length: np.ndarray,
    offset: np.ndarray,
    windows: SequenceWindows,
    window: int,
    stride: int,
    tail: str,
) -> tuple[np.ndarray, np.ndarray]:
    """(start inside its sequence, tokens read <= T+1) of window k of each sequence, int64 [n]."""
    t1 = window + 1
    local = offset + k * stride  # the grid; k == full is the tail window (pad: next grid start)
    if tail == "cover":
        local = np.where(k >= windows.full, length - t1, local)
    local = np.where(windows.short, 0, local)
    return local, np.minimum(t1, length - local)


def draw_offsets(seq_len: np.ndarray, cfg: DataConfig, rng: np.random.Generator) -> np.ndarray:
    """int64 first window start of each sequence, uniform in [0, min(stride-1, len-(T+1))].

    floor(u * (high+1)) with u a multiple of 2^-53 in [0, 1): each offset's probability is off
    by less than stride / 2^53, and it is twice as fast as Generator.integers with array bounds.
    """
    high = np.clip(np.minimum(cfg.stride - 1, seq_len - (cfg.window + 1)), 0, None)  # [n]
    return np.minimum((rng.random(len(seq_len)) * (high + 1)).astype(np.int64), high)


def place_windows(
    chunks, n_seq: int, cfg: DataConfig, rng: np.random.Generator
) -> tuple[np.ndarray | None, np.ndarray]:
    """(offset of each sequence or None, int64 [n_seq+1] samples before each sequence), from
    the sequence lengths given in consecutive chunks (bounded temporaries)."""
    random = cfg.random_offset and cfg.stride > 1
    offsets = np.zeros(n_seq, dtype=index_dtype(cfg.stride)) if random else None
    window_cum = np.zeros(n_seq + 1, dtype=np.int64)
    lo = 0
    for seq_len in chunks:
        hi = lo + len(seq_len)
        offset = draw_offsets(seq_len, cfg, rng) if random else 0
        if random:
            offsets[lo:hi] = offset
        windows = sequence_windows(seq_len, offset, cfg.window, cfg.stride, cfg.tail)
        window_cum[lo + 1 : hi + 1] = windows.count
        lo = hi
    np.cumsum(window_cum, out=window_cum)
    return offsets, window_cum


def validation_config(cfg: DataConfig) -> DataConfig:
    """Validation windows: stride = window, no offset, padded tail, no snapping, no shuffling
    (each token once)."""
    return replace(
        cfg,
        stride=cfg.window,
        random_offset=False,
        tail="pad",
        snap="none",
        shuffle=False,
        shuffle_documents=False,
    )
