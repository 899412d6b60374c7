"""What an epoch plan does to the data, without training: coverage, overlap, fill, mixing.

Token-level quantities come from sweeps over window boundaries, not per-token arrays:
"how many windows target stream position x" is a step function that changes only at
window edges; in plan order the edges are already sorted, so one sweep over chunks of
samples gives its histogram, its value at any point and its integral over any document
(hence per-source counts) in memory per document, not per sample (`Coverage`).
Multiplicities count positions of the epoch stream: with mixing weights a document copy
is a separate position.

On a store with conversations (`EpochPlan.chat_mask`), `supervised_tokens`,
`supervised_ratio` and the per-source `supervised_tokens` count the labels the loader gives:
only the targets data.chat_supervised keeps (`chat_targets`, which reads the role codes).
What describes the windows stays per stream position, whatever a token's role:
`target_multiplicity_mean` (window targets / stream tokens), `never_target_fraction`,
`overlap_ratio` and the `target_multiplicity` histogram count every position a window
targets, so they compare across chat_supervised settings and with plain text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packlm.data.epoch.plan import EpochPlan
from packlm.data.epoch.snap import on_boundary
from packlm.data.epoch.statistics.attention_work import AttentionWork
from packlm.data.epoch.statistics.chat_targets import chat_targets
from packlm.data.epoch.statistics.coverage import CHUNK, Coverage, Histogram

__all__ = ["CHUNK", "Coverage", "Histogram", "plan_statistics", "to_json"]


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
    a sample), never a full array per sample.

    `window_starts_on_boundary`: the fraction of window starts on a document start or, when
    the plan holds the store's paragraph starts (data.snap=paragraph), on a paragraph start
    (`window_start_at_document_start` counts document starts only).
    `attention_useful_fraction`: allowed (query, key) pairs of the samples / pairs of a dense
    causal T x T mask, as logged per step (`packlm.data.epoch.statistics.attention_work`)."""
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
    sums = np.zeros(4, dtype=np.int64)  # target occurrences, non-pad, padded, on a boundary
    work = AttentionWork(doc_start, t, plan.packing)
    for a in range(0, n, CHUNK):
        _, g, r = plan.windows(np.arange(a, min(a + CHUNK, n)))  # [c] each
        nonpad = np.minimum(r, t)
        targets.add(g + 1, g + r)
        inputs.add(g, g + nonpad)
        first_doc = np.searchsorted(doc_start, g, side="right") - 1  # [c]
        local = g - doc_start[first_doc]
        distance[a : a + len(g)] = local
        boundary = on_boundary(plan, first_doc, local).sum()
        sums += ((r - 1).sum(), nonpad.sum(), (r < t + 1).sum(), boundary)
        work.add(g, r)
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
    target_occurrences, nonpad_tokens, padded, on_a_boundary = (int(v) for v in sums)
    supervised = target_occurrences - targets.at_sum  # window targets, every role
    targeted = int(counts[1:].sum())  # positions targeted at least once
    # the labels: under a chat mask, only the targets data.chat_supervised keeps
    chat = None if plan.chat_mask is None else chat_targets(plan, doc_sources, n_src)
    labelled = supervised if chat is None else chat.total

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
        "supervised_tokens": labelled,
        "fill_ratio": _ratio(nonpad_tokens, n * t),
        "supervised_ratio": _ratio(labelled, n * t),
        "target_multiplicity_mean": _ratio(supervised, n_tok),
        "never_target_fraction": _ratio(int(counts[0]), n_tok),
        "overlap_ratio": _ratio(supervised - targeted, supervised),
        "stride_gap_tokens": gap_tokens,
        "window_start_at_document_start": _ratio(int((distance == 0).sum()), n),
        "window_starts_on_boundary": _ratio(on_a_boundary, n),
        "attention_useful_fraction": work.useful_fraction,
        "histograms": {
            "target_multiplicity": Histogram.of_integers(counts),
            "windows_per_sequence": Histogram.of_values(per_sequence),
            "window_start_in_document": Histogram.of_values(distance),
            "document_length": Histogram.of_values(lengths),
        },
    }
    if doc_sources is not None:
        stats["sources"] = _per_source(
            plan, source_names, n_src, samples_src, tokens_src, inputs, targets, chat
        )
    return stats


def _per_source(plan, names, n, samples, tokens, inputs, targets, chat=None):
    """Samples (by the source of their first token), input and supervised tokens per source
    (`chat`: the chat mask's targets, else the coverage's)."""
    nonpad = inputs.area_by_label
    target = targets.area_by_label - targets.at_by_label if chat is None else chat.by_source
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
