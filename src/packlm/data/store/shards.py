"""data.shard=i/N: which files, or pieces of files, shard i reads.

With at least N files, a shard is a contiguous run of the sources' files in reading order,
the runs balanced by bytes (each file goes to the shard holding its middle byte), none
empty (`file_shards`); a file is never split. With fewer files than shards (one big file),
the corpus's bytes are cut at N-1 targets j/N of the way, each target moved forward to the
next place its file can be cut between records (`piece_bounds`; where a file can be cut:
`packlm.data.store.sources.cuts`). Either way the shards are contiguous and keep the reading
order, so shard 0's documents, then shard 1's, ... are one store's documents in one store's
order: the union of the N stores (`packlm.data.store.union`) is that store, id for id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Cuttable(Protocol):
    lo: int
    hi: int
    weight: int

    def snap(self, at: int) -> int: ...


def file_shards(sizes: np.ndarray, n: int) -> np.ndarray:
    """int64 [F]: the shard of each file (sizes in reading order), nondecreasing."""
    sizes = np.asarray(sizes, dtype=np.float64)  # [F]
    f = len(sizes)
    total = sizes.sum()
    middle = (np.cumsum(sizes) - sizes / 2) / total if total > 0 else (np.arange(f) + 0.5) / f
    owner = np.minimum((middle * n).astype(np.int64), n - 1)  # [F]
    if f < n:
        return owner  # some shard is empty: the caller names it
    # first file of shards 1..n-1, moved so that every shard keeps at least one file
    k = np.arange(1, n)
    starts = np.searchsorted(owner, k, side="left")
    starts = np.maximum.accumulate(np.maximum(starts, k) - k) + k  # increasing, [0] >= 1
    starts = np.minimum(starts, f - n + k)  # room for the shards after
    return np.searchsorted(starts, np.arange(f), side="right").astype(np.int64)


def piece_bounds(files: Sequence[Cuttable], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shard j reads bytes [bounds[f, j], bounds[f, j+1]) of file f where held[f, j].

    Returns bounds int64 [F, n+1] (nondecreasing along j, from each file's lo to its hi),
    held bool [F, n] (each file's non-empty pieces; an empty file in the shard of its
    position), and cut_in int64 [n-1]: the file each cut target fell in."""
    weights = np.array([f.weight for f in files], dtype=np.int64)  # [F]
    ends = np.cumsum(weights)  # [F]
    total = int(ends[-1]) if len(ends) else 0
    targets = np.arange(1, n, dtype=np.int64) * total // n  # [n-1]
    # the file holding each target; with no bytes at all, every cut after the last file
    cut_in = np.searchsorted(ends, targets, side="right") if total else np.full(n - 1, len(files))
    lo = np.array([f.lo for f in files], dtype=np.int64)
    hi = np.array([f.hi for f in files], dtype=np.int64)
    bounds = np.empty((len(files), n + 1), dtype=np.int64)
    bounds[:, 0], bounds[:, n] = lo, hi
    for j, (t, k) in enumerate(zip(targets, cut_in, strict=True), start=1):
        index = np.arange(len(files))
        bounds[:, j] = np.where(index < k, hi, lo)
        if k < len(files):
            bounds[k, j] = files[k].snap(int(t - (ends[k] - weights[k])))
    held = bounds[:, 1:] > bounds[:, :-1]  # [F, n]
    empty = lo == hi
    owner = (cut_in[None, :] < np.arange(len(files))[:, None]).sum(axis=1)  # [F]
    held[empty] = np.arange(n)[None, :] == owner[empty, None]
    return bounds, held, cut_in
