"""Packing: epoch documents -> sequences, documents never cut.

Part of the epoch plan (packlm.data.epoch.plan). `data.pack_strategy=ordered`: a pack holds
whole consecutive documents of the epoch order up to `data.pack_size` tokens (greedy: it
closes when the next document does not fit); a longer document is a pack alone. `best_fit`
(packlm.data.epoch.packing.best_fit) first reorders each buffer of the epoch order so its packs are
tighter, then the packs are intervals of the new order just the same.
"""

from __future__ import annotations

import numpy as np

from packlm.config.data import DataConfig
from packlm.data.epoch.indexing import index_dtype
from packlm.data.epoch.packing.best_fit import best_fit_packs

_CHUNK = 1 << 20  # documents per vectorized step: bounds the temporaries


def reorder_for_packing(
    order: np.ndarray, lengths: np.ndarray, cfg: DataConfig, doc_groups: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """best_fit: (the epoch order with each pack's documents adjacent, first document of each
    pack then n_ord, pack lengths); ordered: (order, None, None), packs come later."""
    if cfg.pack_strategy != "best_fit" or cfg.packing == "none" or cfg.pack_size is None:
        return order, None, None
    return best_fit_packs(order, lengths, cfg.pack_size, cfg.pack_buffer, doc_groups)


def make_sequences(
    order: np.ndarray, lengths: np.ndarray, anchors: np.ndarray, cfg: DataConfig
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Ordered packing: (first epoch document of each sequence, then n_ord; their lengths),
    both None for packing none (one sequence per document)."""
    n = len(order)
    if cfg.packing == "none":
        return None, None
    if cfg.pack_size is None:  # the whole stream is one sequence
        return np.array([0, n], dtype=np.int64), anchors[-1:].copy()
    cum = np.zeros(n + 1, dtype=np.int64)  # stream start of every epoch document
    for lo in range(0, n, _CHUNK):
        np.cumsum(lengths[order[lo : lo + _CHUNK]], out=cum[lo + 1 : lo + _CHUNK + 1])
        cum[lo + 1 : lo + _CHUNK + 1] += cum[lo]
    seq_first = greedy_packs(cum, cfg.pack_size)
    return seq_first, np.diff(cum[seq_first])


def greedy_packs(cum: np.ndarray, pack_size: int) -> np.ndarray:
    """Ordered greedy packing: first document of each pack, then n; documents never cut.

    next(i) is where a pack starting at document i ends (at least i+1: an over-long document
    is a pack alone). The pack starts are the path 0, next(0), next(next(0)), ..., found by
    pointer doubling: after round k, `on` holds the first 2^k path nodes and `jump` = next^(2^k),
    so log2(packs) vectorized rounds replace a Python loop over packs.
    """
    n = len(cum) - 1
    dtype = index_dtype(n + 1)
    jump = np.empty(n + 1, dtype=dtype)
    for lo in range(0, n, _CHUNK):  # last document that still fits a pack starting at each one
        hi = min(n, lo + _CHUNK)
        reach = np.searchsorted(cum, cum[lo:hi] + pack_size, side="right") - 1
        jump[lo:hi] = np.maximum(reach, np.arange(lo + 1, hi + 1))
    jump[n] = n
    on = np.zeros(n + 1, dtype=bool)
    on[0] = True
    nodes = np.zeros(1, dtype=dtype)
    while True:
        targets = jump[nodes]
        on[targets] = True
        if (targets == n).all():
            return np.flatnonzero(on)
        nodes = np.flatnonzero(on).astype(dtype)
        jump = jump[jump]
