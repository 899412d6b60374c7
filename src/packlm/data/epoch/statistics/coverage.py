"""Sweeps and histograms behind the plan statistics (packlm.data.epoch.statistics).

`Coverage` counts how many intervals (windows) hold each stream position with one sweep over
window edges in plan order, in memory per document, not per sample; `Histogram` holds
bucketed values in the form TensorBoard's add_histogram_raw wants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

CHUNK = 1 << 16  # samples per call: plan.windows builds [n, 31] int64 temporaries


@dataclass
class Histogram:
    """Bucketed values plus the moments TensorBoard's add_histogram_raw wants."""

    edges: np.ndarray  # float64 [k+1]
    counts: np.ndarray  # int64 [k]
    min: float
    max: float
    num: int
    sum: float
    sum_squares: float

    @classmethod
    def of_values(cls, values: np.ndarray, bins: int = 32) -> Histogram:
        """Of any numeric array, converted to float64 a chunk at a time (no full copy)."""
        values = np.asarray(values).reshape(-1)
        if values.size == 0:
            return cls(np.zeros(2), np.zeros(1, np.int64), 0.0, 0.0, 0, 0.0, 0.0)
        lo, hi = float(values.min()), float(values.max())
        counts, edges, total, squares = np.zeros(bins, np.int64), None, 0.0, 0.0
        for a in range(0, values.size, CHUNK):
            part = values[a : a + CHUNK].astype(np.float64)
            c, edges = np.histogram(part, bins=bins, range=(lo, hi))
            counts += c
            total += float(part.sum())
            squares += float(np.square(part).sum())
        return cls(edges, counts, lo, hi, int(values.size), total, squares)

    @classmethod
    def of_integers(cls, counts: np.ndarray) -> Histogram:
        """From counts[v] = how many items have the integer value v."""
        counts = np.asarray(counts, dtype=np.int64)
        v = np.arange(len(counts), dtype=np.float64)
        present = np.flatnonzero(counts)
        lo, hi = (float(present[0]), float(present[-1])) if present.size else (0.0, 0.0)
        return cls(
            np.arange(len(counts) + 1) - 0.5,
            counts,
            lo,
            hi,
            int(counts.sum()),
            float((counts * v).sum()),
            float((counts * v * v).sum()),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "edges": self.edges.tolist(),
            "counts": self.counts.tolist(),
            "min": self.min,
            "max": self.max,
            "num": self.num,
            "mean": self.sum / max(self.num, 1),
        }


class Coverage:
    """c(x) = #intervals [start, end) holding x, swept left to right over chunks of intervals.

    Intervals arrive in plan order, where both starts and ends are non-decreasing, so once a
    chunk is in, no later edge lies before its last start: everything up to there is final.
    The sweep keeps only the edges past that point (about window/stride of them) and sums:
    `counts` (positions per value of c); at the sorted `at_points`: `at_sum`, `at_counts`
    (points per value of c) and `at_by_label` (c summed per label of the point); and
    `area_by_label`: the integral of c between consecutive `bounds`, summed per label of the
    interval (per-document integrals summed per source). No output grows with the samples.
    """

    def __init__(self, total, at_points, at_labels=None, bounds=None, labels=None, n_labels=0):
        self.total = int(total)
        self.counts = np.zeros(1, dtype=np.float64)  # exact: integers < 2**53
        self.at_counts = np.zeros(1, dtype=np.float64)
        self.at_sum = 0
        self.at_by_label = np.zeros(n_labels)
        self.area_by_label = np.zeros(n_labels)
        self._at, self._at_labels = at_points, at_labels
        self._bounds = np.zeros(0, np.int64) if bounds is None else bounds
        self._labels = labels
        self._done = [0, 0]  # points of _at / _bounds answered so far
        self._last_area = 0  # the integral at the last bound answered
        self._pos = np.zeros(0, np.int64)  # edges not swept yet
        self._delta = np.zeros(0, np.int64)
        self._x, self._level, self._area = 0, 0, 0  # swept [0, x): c(x-), integral

    def add(self, starts: np.ndarray, ends: np.ndarray) -> None:
        if len(starts):
            self._sweep(starts, ends, int(starts[-1]))

    def finish(self) -> Coverage:
        self._sweep(np.zeros(0, np.int64), np.zeros(0, np.int64), self.total + 1)
        self.counts, self.at_counts = self.counts.astype(np.int64), self.at_counts.astype(np.int64)
        self._at = self._at_labels = self._bounds = self._labels = None  # free them
        return self

    def _sweep(self, starts: np.ndarray, ends: np.ndarray, upto: int) -> None:
        pos = np.concatenate([self._pos, starts, ends])
        ones = np.ones(len(starts), np.int64)
        delta = np.concatenate([self._delta, ones, -np.ones(len(ends), np.int64)])
        now = pos < upto
        self._pos, self._delta = pos[~now], delta[~now]
        order = np.argsort(pos[now], kind="stable")
        edge = np.concatenate(
            [[self._x], pos[now][order]]
        )  # [m]: segment k is [edge[k], edge[k+1])
        level = self._level + np.concatenate([[0], np.cumsum(delta[now][order])])  # [m]
        width = np.diff(np.concatenate([edge, [upto]]))  # [m]
        inside = np.minimum(edge + width, self.total) - np.minimum(edge, self.total)  # [m]
        self.counts = _add_bins(self.counts, np.bincount(level, weights=inside))
        area = self._area + np.concatenate([[0], np.cumsum(level * width)])  # [m+1]
        lo, hi = self._done[0], int(np.searchsorted(self._at, upto))
        if hi > lo:
            c = level[np.searchsorted(edge, self._at[lo:hi], side="right") - 1]  # [q]
            self.at_sum += int(c.sum())
            self.at_counts = _add_bins(self.at_counts, np.bincount(c).astype(np.float64))
            if self._at_labels is not None:
                self.at_by_label += np.bincount(
                    self._at_labels[lo:hi], weights=c, minlength=len(self.at_by_label)
                )
        self._done[0] = hi
        lo, hi = self._done[1], int(np.searchsorted(self._bounds, upto))
        if hi > lo:
            x = self._bounds[lo:hi]
            k = np.searchsorted(edge, x, side="right") - 1
            value = area[k] + level[k] * (x - edge[k])  # [q]: the integral at each bound
            if self._labels is not None:
                diffs = np.diff(value, prepend=self._last_area)[int(lo == 0) :]  # per interval
                self.area_by_label += np.bincount(
                    self._labels[max(lo - 1, 0) : hi - 1],
                    weights=diffs,
                    minlength=len(self.area_by_label),
                )
            self._last_area = int(value[-1])
        self._done[1] = hi
        self._x, self._level, self._area = upto, int(level[-1]), int(area[-1])


def _add_bins(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b for histograms of different lengths (the missing bins are 0)."""
    if len(b) > len(a):
        a, b = b, a
    a[: len(b)] += b
    return a
