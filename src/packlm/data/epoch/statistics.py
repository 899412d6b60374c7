"""What an epoch plan does to the data, without training: coverage, overlap, fill, mixing.

Token-level quantities come from sweeps over window boundaries, not per-token arrays:
"how many windows target stream position x" is a step function that changes only at
window edges, so sorting the 2·S edges gives its histogram, its value at any point and
its integral over any document (hence per-source counts) in O(S log S + documents).
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
        values = np.asarray(values, dtype=np.float64)
        if values.size == 0:
            return cls(np.zeros(2), np.zeros(1, np.int64), 0.0, 0.0, 0, 0.0, 0.0)
        counts, edges = np.histogram(values, bins=bins)
        return cls(
            edges,
            counts.astype(np.int64),
            float(values.min()),
            float(values.max()),
            int(values.size),
            float(values.sum()),
            float(np.square(values).sum()),
        )

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


class StepFunction:
    """c(x) = #intervals [start, end) holding x, from sorted interval edges."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, total: int):
        pos = np.concatenate([starts, ends, [0, total]]).astype(np.int64)
        delta = np.concatenate([np.ones(len(starts)), -np.ones(len(ends)), [0, 0]]).astype(np.int64)
        order = np.argsort(pos, kind="stable")
        self.pos = pos[order]  # [m]
        self.level = np.cumsum(delta[order])  # [m]: value on [pos[k], pos[k+1])
        widths = np.diff(self.pos)  # [m-1]
        # [m]: integral up to pos[k]; then how many positions have each value
        self.area = np.concatenate([[0], np.cumsum(self.level[:-1] * widths)])
        self.counts = np.bincount(self.level[:-1], weights=widths).astype(np.int64)

    def at(self, x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.pos, x, side="right") - 1
        return self.level[k]

    def integral(self, x: np.ndarray) -> np.ndarray:
        """Integral of c over [0, x)."""
        k = np.searchsorted(self.pos, x, side="right") - 1
        return self.area[k] + self.level[k] * (x - self.pos[k])


CHUNK = 1 << 16  # ids per call: plan.windows/layout build [n, 31] int64 temporaries


def _chunked(fn, n: int) -> tuple[np.ndarray, ...]:
    """fn(ids) over ids 0..n-1 in chunks, outputs concatenated: memory O(n), not O(31 n)."""
    parts = [fn(np.arange(a, min(a + CHUNK, n))) for a in range(0, n, CHUNK)] or [fn(np.arange(0))]
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def plan_statistics(
    plan: EpochPlan,
    doc_sources: np.ndarray | None = None,
    source_names: list[str] | None = None,
) -> dict[str, Any]:
    """Every statistic of one epoch's plan as plain numbers, plus Histogram objects under
    "histograms" (use `to_json` for a printable dict)."""
    t = plan.window
    n_tok = plan.n_tokens
    lengths = plan.doc_lengths[plan.order]  # [n_ord] epoch document lengths
    doc_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)  # [n_ord+1]
    _, g, r = _chunked(plan.windows, plan.n_samples)  # [S] each
    nonpad = np.minimum(r, t)

    targets = StepFunction(g + 1, g + r, n_tok)  # windows targeting each stream position
    inputs = StepFunction(g, g + nonpad, n_tok)  # windows reading each position as input
    counts = targets.counts.copy()
    masked_starts = np.zeros(0, dtype=np.int64)
    if plan.packing != "stream":  # the first token of a document is never a target
        masked_starts = np.unique(doc_start[:-1][lengths > 0])
        counts[0] += len(masked_starts)
        np.subtract.at(counts, targets.at(masked_starts), 1)
    counts = counts[: max(1, len(np.trim_zeros(counts, "b")))]
    target_occurrences = int((r - 1).sum())
    masked = int(targets.at(masked_starts).sum())
    supervised = target_occurrences - masked
    targeted = int(counts[1:].sum())  # positions targeted at least once

    # windows per sequence and the stride gaps (stride > window leaves tokens no window targets)
    _, seq_len, _, full = _chunked(plan.layout, plan.n_sequences)
    per_sequence = np.diff(plan.window_cum)
    gap_tokens = int((np.maximum(full - 1, 0) * max(0, plan.stride - t)).sum())

    # where windows start relative to their document's start
    first_doc = np.searchsorted(doc_start, g, side="right") - 1
    distance = g - doc_start[first_doc] if len(g) else np.zeros(0, np.int64)

    stats: dict[str, Any] = {
        "epoch": plan.epoch,
        "seed": plan.seed,
        "window": t,
        "stride": plan.stride,
        "stride_exceeds_window": plan.stride > t,
        "documents": plan.n_documents,
        "stream_tokens": n_tok,
        "sequences": plan.n_sequences,
        "samples": plan.n_samples,
        "windows_per_sequence": float(per_sequence.mean()) if len(per_sequence) else 0.0,
        "full_windows": int(full.sum()),
        "tail_windows": int(
            plan.n_samples - full.sum() - ((seq_len < t + 1) & (seq_len > 0)).sum()
        ),
        "padded_samples": int((r < t + 1).sum()),
        "input_tokens": plan.n_samples * t,
        "nonpad_tokens": int(nonpad.sum()),
        "supervised_tokens": supervised,
        "fill_ratio": _ratio(int(nonpad.sum()), plan.n_samples * t),
        "supervised_ratio": _ratio(supervised, plan.n_samples * t),
        "target_multiplicity_mean": _ratio(supervised, n_tok),
        "never_target_fraction": _ratio(int(counts[0]), n_tok),
        "overlap_ratio": _ratio(supervised - targeted, supervised),
        "stride_gap_tokens": gap_tokens,
        "window_start_at_document_start": _ratio(int((distance == 0).sum()), len(distance)),
        "histograms": {
            "target_multiplicity": Histogram.of_integers(counts),
            "windows_per_sequence": Histogram.of_values(per_sequence),
            "window_start_in_document": Histogram.of_values(distance),
            "document_length": Histogram.of_values(lengths),
        },
    }
    if doc_sources is not None:
        stats["sources"] = _per_source(
            plan, doc_sources, source_names, first_doc, doc_start, inputs, targets, masked_starts
        )
    return stats


def _per_source(plan, doc_sources, names, first_doc, doc_start, inputs, targets, masked_starts):
    """Samples (by the source of their first token), input and supervised tokens per source."""
    src = np.asarray(doc_sources)[plan.order]  # [n_ord] source of each epoch document
    n = max(len(names or []), int(src.max()) + 1 if len(src) else 0)
    samples = np.bincount(src[first_doc], minlength=n)
    nonpad = np.bincount(src, weights=np.diff(inputs.integral(doc_start)), minlength=n)
    target = np.bincount(src, weights=np.diff(targets.integral(doc_start)), minlength=n)
    if len(masked_starts):
        owner = np.searchsorted(doc_start, masked_starts, side="right") - 1
        target -= np.bincount(src[owner], weights=targets.at(masked_starts), minlength=n)
    tokens = np.bincount(src, weights=plan.doc_lengths[plan.order], minlength=n)
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
