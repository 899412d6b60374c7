"""Plan statistics against brute force over the batches the plan really produces."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.plans import PAD, all_batches, config, plan_of, position_dataset, target_counts
from packlm.data.epoch.statistics import Histogram, plan_statistics, to_json

LENGTHS = np.random.default_rng(0).integers(1, 40, size=80)
SOURCES = np.arange(80) % 3


def brute_force(plan, lengths, sources):
    """Counts from the batches: tokens are their store positions."""
    batches = all_batches(plan, position_dataset(lengths, plan.window), 6)
    doc_of = np.repeat(np.arange(len(lengths)), lengths)
    ids = np.concatenate([b["input_ids"].numpy() for b in batches])  # [rows, T]
    labels = np.concatenate([b["labels"].numpy() for b in batches])
    real_rows = ids[:, 0] != PAD
    ids, labels = ids[real_rows], labels[real_rows]
    nonpad_src = np.bincount(sources[doc_of[ids[ids != PAD]]], minlength=3)
    sup_src = np.bincount(sources[doc_of[labels[labels >= 0]]], minlength=3)
    samples_src = np.bincount(sources[doc_of[ids[:, 0]]], minlength=3)
    counts = target_counts(batches, int(lengths.sum()))
    return (
        len(ids),
        counts,
        int((ids != PAD).sum()),
        int((labels >= 0).sum()),
        nonpad_src,
        sup_src,
        samples_src,
    )


@pytest.mark.parametrize(
    "overrides",
    [
        dict(packing="none", stride=3, tail="cover"),
        dict(packing="document", stride=5, tail="pad", random_offset=True),
        dict(packing="stream", stride=2, tail="drop", pack_size=20),
        dict(packing="document", stride=11, tail="pad"),  # stride > window
    ],
)
def test_statistics_equal_brute_force_counts(overrides):
    plan = plan_of(LENGTHS, config(window=8, **overrides), epoch=2)
    stats = plan_statistics(plan, SOURCES, ["x", "y", "z"])
    n, counts, nonpad, supervised, nonpad_src, sup_src, samples_src = brute_force(
        plan, LENGTHS, SOURCES
    )
    assert stats["samples"] == n
    assert stats["nonpad_tokens"] == nonpad and stats["supervised_tokens"] == supervised
    assert stats["input_tokens"] == n * 8
    hist = stats["histograms"]["target_multiplicity"]
    assert hist.counts.tolist() == np.bincount(counts).tolist()
    assert stats["never_target_fraction"] == pytest.approx((counts == 0).mean())
    assert stats["overlap_ratio"] == pytest.approx(
        (counts.sum() - (counts > 0).sum()) / counts.sum()
    )
    for i, name in enumerate("xyz"):
        src = stats["sources"][name]
        assert (src["samples"], src["nonpad_tokens"], src["supervised_tokens"]) == (
            samples_src[i],
            nonpad_src[i],
            sup_src[i],
        )
    gap = max(0, plan.stride - 8)
    assert stats["stride_exceeds_window"] == (gap > 0)
    if gap:
        assert stats["stride_gap_tokens"] > 0


def test_stride_equal_to_window_has_no_overlap_and_gap():
    stats = plan_statistics(plan_of(LENGTHS, config(window=8, stride=8, packing="stream")))
    assert stats["overlap_ratio"] == 0 and stats["stride_gap_tokens"] == 0
    assert stats["never_target_fraction"] == pytest.approx(1 / LENGTHS.sum())  # only position 0


def test_stride_gaps_are_counted_exactly():
    # one 100-token document, T=8, stride 12: windows at 0, 12, ..., 84 (8 full windows, 7 gaps
    # of 12-8 = 4 untargeted tokens between consecutive windows)
    stats = plan_statistics(
        plan_of([100], config(window=8, stride=12, packing="none", tail="drop"))
    )
    assert stats["full_windows"] == 8 and stats["stride_gap_tokens"] == 7 * 4


def test_window_starts_relative_to_documents():
    stats = plan_statistics(
        plan_of([10, 10], config(window=4, stride=5, packing="document", tail="drop"))
    )
    hist = stats["histograms"]["window_start_in_document"]
    # windows at 0, 5, 10, 15: distances 0, 5, 0, 5 from their document's start
    assert stats["window_start_at_document_start"] == 0.5
    assert (hist.min, hist.max, hist.num, hist.sum) == (0, 5, 4, 10)


def test_histograms_serialize_and_integer_histograms_have_exact_moments():
    h = Histogram.of_integers(np.array([2, 0, 3]))  # values 0, 0, 2, 2, 2
    assert (h.num, h.sum, h.sum_squares, h.min, h.max) == (5, 6, 12, 0, 2)
    js = to_json(plan_statistics(plan_of(LENGTHS, config(window=8))))
    assert isinstance(js["histograms"]["document_length"]["counts"], list)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(packing="document", stride=2, tail="cover", random_offset=True, shuffle=True),
        dict(packing="stream", stride=3, tail="pad", pack_size=30),
        dict(packing="none", stride=1, tail="drop"),
    ],
)
@pytest.mark.parametrize("chunk", [1, 2, 7, 64])
def test_streamed_statistics_do_not_depend_on_the_chunk_size(monkeypatch, overrides, chunk):
    """The sweep over chunks of samples gives exactly the statistics of a single chunk."""
    from packlm.data.epoch.statistics import summary as statistics

    plan = plan_of(LENGTHS, config(window=8, **overrides), epoch=1)
    whole = to_json(plan_statistics(plan, SOURCES, ["x", "y", "z"]))
    monkeypatch.setattr(statistics, "CHUNK", chunk)
    assert to_json(plan_statistics(plan, SOURCES, ["x", "y", "z"])) == whole


def test_statistics_memory_grows_by_less_than_32_bytes_a_sample(monkeypatch):
    """Peak memory beyond the plan grows by < 32 bytes per sample (stride = window / 8; the
    growth between two corpus sizes, so the fixed per-chunk buffers cancel out). bench/plan.py
    measures the absolute figure at 1e9 tokens."""
    import tracemalloc

    from packlm.data.epoch.statistics import summary as statistics

    monkeypatch.setattr(statistics, "CHUNK", 4096)
    peaks, samples = [], []
    for n_docs in (10_000, 40_000):
        lengths = np.random.default_rng(1).integers(1, 200, size=n_docs)
        plan = plan_of(lengths, config(window=64, stride=8, packing="document"), epoch=1)
        tracemalloc.start()
        plan_statistics(plan, lengths % 3, ["a", "b", "c"])
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        samples.append(plan.n_samples)
    per_sample = (peaks[1] - peaks[0]) / (samples[1] - samples[0])
    assert samples[0] > 100_000
    assert 0 < per_sample < 32, per_sample
