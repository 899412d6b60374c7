"""Attention work of a plan's samples, from the plan alone (no token read).

The same definition as the per-step `attention/useful_fraction`
(`packlm.model.loss.attention_pairs`): a row's input (its first min(R, T) tokens) is cut
into document pieces (one piece per row in `stream` mode); a piece of n tokens allows
n (n+1) / 2 causal (query, key) pairs; PAD queries count nothing (the mask lets each attend
to itself only, which is no work worth a kernel); a dense causal T x T row computes
T (T+1) / 2. The fraction is their ratio over the epoch's samples (the per-step value also
counts the all-PAD rows that fill an epoch's last batch, which the plan does not have).

A sample's pieces are its first and last documents' parts plus the whole documents between,
so one prefix sum of n (n+1) / 2 over the epoch's documents gives every sample's pairs in
O(1): 8 bytes per epoch document.
"""

from __future__ import annotations

import numpy as np


def triangle(n: np.ndarray) -> np.ndarray:
    """Causal pairs of n tokens: n (n+1) / 2."""
    return n * (n + 1) // 2


class AttentionWork:
    """Allowed (query, key) pairs of samples of one plan, summed chunk by chunk."""

    def __init__(self, doc_start: np.ndarray, window: int, packing: str):
        self.doc_start = doc_start  # int64 [n_ord+1]: stream start of each epoch document
        self.window = window
        self.stream = packing == "stream"
        self.pairs_before = np.zeros(len(doc_start), dtype=np.int64)  # [n_ord+1]
        np.cumsum(triangle(np.diff(doc_start)), out=self.pairs_before[1:])
        self.allowed = 0
        self.samples = 0

    def add(self, g: np.ndarray, r: np.ndarray) -> None:
        """Samples starting at stream positions g that read r tokens (int64 [c] each)."""
        n = np.minimum(r, self.window)  # [c] input tokens (the rest is PAD)
        self.samples += len(g)
        if self.stream:
            self.allowed += int(triangle(n).sum())
            return
        end = g + n
        first = np.searchsorted(self.doc_start, g, side="right") - 1  # [c]
        last = np.searchsorted(self.doc_start, end - 1, side="right") - 1  # [c]
        head = np.minimum(end, self.doc_start[first + 1]) - g  # first document's piece
        tail = end - np.maximum(g, self.doc_start[last])  # last document's piece
        middle = self.pairs_before[last] - self.pairs_before[np.minimum(first + 1, last)]
        pairs = np.where(first == last, triangle(n), triangle(head) + triangle(tail) + middle)
        self.allowed += int(pairs.sum())

    @property
    def dense(self) -> int:
        """Pairs a dense causal mask computes over the same rows."""
        return self.samples * int(triangle(np.int64(self.window)))

    @property
    def useful_fraction(self) -> float:
        return self.allowed / self.dense if self.dense else 0.0
