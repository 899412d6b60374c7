"""The statistics window_starts_on_boundary and attention_useful_fraction against brute
force over the batches the plan really produces (tokens = store positions)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from helpers.plan_properties import plan_cases
from helpers.plans import PAD, all_batches, config, plan_of, position_dataset
from packlm.data.epoch.statistics import plan_statistics
from packlm.model.loss import attention_pairs

LENGTHS = np.random.default_rng(0).integers(1, 40, size=90)


def brute_force(plan, lengths, paragraph_starts=()):
    """(fraction of real rows starting on a document or paragraph start, allowed attention
    pairs / dense causal pairs of the real rows), from the collated batches."""
    batches = all_batches(plan, position_dataset(lengths, plan.window), 4)
    if not batches:
        return 0.0, 0.0
    boundaries = set(np.cumsum(np.r_[0, lengths])[:-1].tolist()) | set(paragraph_starts)
    starts, allowed, rows = [], 0.0, 0
    for b in batches:
        real = (b["input_ids"] != PAD).any(dim=1)
        starts += b["input_ids"][real, 0].tolist()
        rows += int(real.sum())
        allowed += float(attention_pairs({k: v[real] for k, v in b.items()})[0])
    t = plan.window
    on = np.mean([s in boundaries for s in starts]) if starts else 0.0
    return on, allowed / (rows * t * (t + 1) / 2) if rows else 0.0


@pytest.mark.parametrize(
    "overrides",
    [
        dict(packing="none", stride=3, tail="cover"),
        dict(packing="document", stride=5, tail="pad", random_offset=True),
        dict(packing="stream", stride=4, tail="drop", pack_size=20),
        dict(packing="document", stride=6, pack_size=25, pack_strategy="best_fit", pack_buffer=9),
        dict(packing="document", stride=7, snap="document", snap_tolerance=4, random_offset=True),
    ],
)
def test_boundary_and_attention_statistics_equal_brute_force(overrides):
    plan = plan_of(LENGTHS, config(window=8, shuffle_documents=True, **overrides), epoch=1)
    stats = plan_statistics(plan)
    on, useful = brute_force(plan, LENGTHS)
    assert stats["window_starts_on_boundary"] == pytest.approx(on)
    assert stats["window_starts_on_boundary"] == stats["window_start_at_document_start"]
    assert stats["attention_useful_fraction"] == pytest.approx(useful, rel=1e-12)
    assert 0 < stats["attention_useful_fraction"] <= 1


def test_with_paragraph_snap_paragraph_starts_count_as_boundaries():
    rng = np.random.default_rng(1)
    n = int(LENGTHS.sum())
    firsts = np.cumsum(np.r_[0, LENGTHS])[:-1]
    starts = np.setdiff1d(rng.choice(n, n // 6, replace=False), firsts).astype(np.uint32)
    base = dict(window=8, stride=6, random_offset=True, shuffle_documents=True)
    plain = plan_statistics(plan_of(LENGTHS, config(**base), paragraph_starts=starts))
    cfg = config(**base, snap="paragraph", snap_tolerance=4)
    plan = plan_of(LENGTHS, cfg, paragraph_starts=starts)
    stats = plan_statistics(plan)
    on, useful = brute_force(plan, LENGTHS, starts.tolist())
    assert stats["window_starts_on_boundary"] == pytest.approx(on)
    assert stats["window_starts_on_boundary"] > plain["window_starts_on_boundary"]
    assert stats["window_starts_on_boundary"] > stats["window_start_at_document_start"]
    assert stats["attention_useful_fraction"] == pytest.approx(useful, rel=1e-12)


def test_stream_rows_without_pad_use_all_of_dense_attention():
    plan = plan_of([400], config(window=8, stride=8, packing="stream", tail="drop"))
    assert plan_statistics(plan)["attention_useful_fraction"] == 1.0
    one_token_docs = plan_of([1] * 90, config(window=8, stride=8, pack_size=9))
    # every row: 8 one-token documents, 8 pairs of 36
    assert plan_statistics(one_token_docs)["attention_useful_fraction"] == pytest.approx(8 / 36)


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(plan_cases())
def test_boundary_and_attention_statistics_on_random_plans(case):
    lengths, cfg, epoch, mix = case
    if cfg.pack_size is not None and len(lengths) % 2:
        cfg = replace(cfg, pack_strategy="best_fit", pack_buffer=2 + len(lengths) % 7).validate()
    plan = plan_of(lengths, cfg, epoch, **mix)
    stats = plan_statistics(plan)
    on, useful = brute_force(plan, lengths)
    assert stats["window_starts_on_boundary"] == pytest.approx(on)
    assert stats["attention_useful_fraction"] == pytest.approx(useful, rel=1e-12)
