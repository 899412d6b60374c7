"""data.shard=i/N: which of the corpus's files shard i reads.

A shard is a contiguous run of the sources' files in reading order, the runs balanced by
bytes (each file goes to the shard holding its middle byte) and, when there are at least N
files, none empty. Contiguous runs keep the reading order, so shard 0's documents, then
shard 1's, ... are one store's documents in one store's order: the union of the N stores
(`packlm.data.store.union`) is that store, id for id. A file is never split between shards.
"""

from __future__ import annotations

import numpy as np


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
