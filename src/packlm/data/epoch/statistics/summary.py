"""What an epoch plan does to the data, without training: coverage, overlap, fill, mixing.

Token-level quantities come from sweeps over window boundaries, not per-token arrays:
"how many windows target stream position x" is a step function that changes only at
window edges; in plan order the edges are already sorted, so one sweep over chunks of
samples gives its histogram, its value at any point and its integral over any document
(hence per-source counts) in memory per document, not per sample (`Coverage`).
Multiplicities count positions of the epoch stream: with mixing weights a document copy
is a separate position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packlm.data.epoch.plan import EpochPlan


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


CHUNK = 1 << 16  # samples per call: plan.windows builds [n, 31] int64 temporaries


def _distance_dtype(longest: int) -> np.dtype:
    return np.dtype(np.uint16 if longest < 2**16 else np.uint32 if longest < 2**32 else np.int64)


def plan_statistics(
    plan: EpochPlan,
    doc_sources: np.ndarray | None = None,
    source_names: list[str] | None = None,
) -> dict[str, Any]:
    """Every statistic of one epoch's plan as plain numbers, plus Histogram objects under
    "histograms" (use `to_json` for a printable dict).

    Samples are streamed in chunks of CHUNK in plan order: beyond the plan, memory is a few
    arrays per document plus the distance of each window start to its document (2-4 bytes
    a sample), never a full array per sample."""
    t, n_tok, n = plan.window, plan.n_tokens, plan.n_samples
    lengths = plan.doc_lengths[plan.order]  # [n_ord] epoch document lengths
    doc_start = np.zeros(len(lengths) + 1, dtype=np.int64)  # [n_ord+1]
    np.cumsum(lengths, out=doc_start[1:])
    src = None if doc_sources is None else np.asarray(doc_sources)[plan.order]  # [n_ord]
    n_src = max(len(source_names or []), int(src.max()) + 1 if src is not None and len(src) else 0)
    # the first token of a document is never a target (a view when no document is empty)
    nonempty = None if lengths.all() else np.flatnonzero(lengths)
    masked_starts, masked_src = doc_start[:-1], src
    if nonempty is not None:
        masked_starts = masked_starts[nonempty]
        masked_src = None if src is None else src[nonempty]
    if plan.packing == "stream":
        masked_starts, masked_src = masked_starts[:0], None if src is None else src[:0]
    bounds = None if src is None else doc_start
    # windows targeting each stream position, and windows reading it as input
    targets = Coverage(n_tok, masked_starts, masked_src, bounds, src, n_src)
    inputs = Coverage(n_tok, masked_starts[:0], None, bounds, src, n_src)
    samples_src = np.zeros(n_src, dtype=np.int64)
    distance = np.zeros(n, dtype=_distance_dtype(int(lengths.max(initial=0))))  # [S]
    sums = np.zeros(3, dtype=np.int64)  # target occurrences, non-pad tokens, padded samples
    for a in range(0, n, CHUNK):
        _, g, r = plan.windows(np.arange(a, min(a + CHUNK, n)))  # [c] each
        nonpad = np.minimum(r, t)
        targets.add(g + 1, g + r)
        inputs.add(g, g + nonpad)
        sums += ((r - 1).sum(), nonpad.sum(), (r < t + 1).sum())
        first_doc = np.searchsorted(doc_start, g, side="right") - 1  # [c]
        distance[a : a + len(g)] = g - doc_start[first_doc]
        if src is not None:
            samples_src += np.bincount(src[first_doc], minlength=n_src)
    targets.finish(), inputs.finish()
    counts = targets.counts  # positions per number of windows targeting them
    n_masked = len(masked_starts)
    del doc_start, masked_starts, masked_src  # per-document arrays no longer needed
    tokens_src = None if src is None else np.bincount(src, weights=lengths, minlength=n_src)
    if n_masked:  # ... a masked document start is targeted by none
        counts[0] += n_masked
        counts[: len(targets.at_counts)] -= targets.at_counts
    counts = counts[: max(1, len(np.trim_zeros(counts, "b")))]
    target_occurrences, nonpad_tokens, padded = (int(v) for v in sums)
    supervised = target_occurrences - targets.at_sum
    targeted = int(counts[1:].sum())  # positions targeted at least once

    # windows per sequence and the stride gaps (stride > window leaves tokens no window targets)
    per_sequence = np.diff(plan.window_cum)
    full_windows, short, gap_tokens = 0, 0, 0
    for a in range(0, plan.n_sequences, CHUNK):
        _, seq_len, _, full = plan.layout(np.arange(a, min(a + CHUNK, plan.n_sequences)))
        full_windows += int(full.sum())
        short += int(((seq_len < t + 1) & (seq_len > 0)).sum())
        gap_tokens += int((np.maximum(full - 1, 0) * max(0, plan.stride - t)).sum())

    stats: dict[str, Any] = {
        "epoch": plan.epoch,
        "seed": plan.seed,
        "window": t,
        "stride": plan.stride,
        "stride_exceeds_window": plan.stride > t,
        "documents": plan.n_documents,
        "stream_tokens": n_tok,
        "sequences": plan.n_sequences,
        "samples": n,
        "windows_per_sequence": float(per_sequence.mean()) if len(per_sequence) else 0.0,
        "full_windows": full_windows,
        "tail_windows": n - full_windows - short,
        "padded_samples": padded,
        "input_tokens": n * t,
        "nonpad_tokens": nonpad_tokens,
        "supervised_tokens": supervised,
        "fill_ratio": _ratio(nonpad_tokens, n * t),
        "supervised_ratio": _ratio(supervised, n * t),
        "target_multiplicity_mean": _ratio(supervised, n_tok),
        "never_target_fraction": _ratio(int(counts[0]), n_tok),
        "overlap_ratio": _ratio(supervised - targeted, supervised),
        "stride_gap_tokens": gap_tokens,
        "window_start_at_document_start": _ratio(int((distance == 0).sum()), n),
        "histograms": {
            "target_multiplicity": Histogram.of_integers(counts),
            "windows_per_sequence": Histogram.of_values(per_sequence),
            "window_start_in_document": Histogram.of_values(distance),
            "document_length": Histogram.of_values(lengths),
        },
    }
    if doc_sources is not None:
        stats["sources"] = _per_source(
            plan, source_names, n_src, samples_src, tokens_src, inputs, targets
        )
    return stats


def _per_source(plan, names, n, samples, tokens, inputs, targets):
    """Samples (by the source of their first token), input and supervised tokens per source."""
    nonpad = inputs.area_by_label
    target = targets.area_by_label - targets.at_by_label
    names = list(names or []) + [str(i) for i in range(len(names or []), n)]
    return {
        names[i]: {
            "samples": int(samples[i]),
            "stream_tokens": int(tokens[i]),
            "nonpad_tokens": int(round(nonpad[i])),
            "supervised_tokens": int(round(target[i])),
            "sample_fraction": _ratio(int(samples[i]), plan.n_samples),
        }
        for i in range(n)
    }


def to_json(stats: dict[str, Any]) -> dict[str, Any]:
    """The statistics with histograms as plain dicts."""
    out = dict(stats)
    out["histograms"] = {k: h.to_dict() for k, h in stats["histograms"].items()}
    return out


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0
