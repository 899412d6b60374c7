"""Fuzzing beyond the default properties.

Already in the default suite (and named in docs/reliability.md):
- tests/tokenizer/test_properties.py: decode(encode(s)) == s for arbitrary Unicode mixed with
  special-token look-alikes (300 strings), and 10,000 strings in the slow suite
  (test_roundtrip_many);
- tests/data/epoch/test_plan_properties.py: random store shapes and configs (150 cases each):
  every sample inside its sequence, no sample twice, the statistics equal the batches.

Added here: the same plan properties on 3,000 cases each (slow), and the rank sharding
property over random plans: ranks together yield every planned sample exactly once, with
equal numbers of batches.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.plan_properties import (
    check_samples_follow_the_reference,
    check_statistics_match_the_batches,
    plan_cases,
)
from helpers.plans import plan_of
from packlm.data.epoch.sampler import PlanSampler

SLOW = settings(
    max_examples=3_000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FAST = settings(max_examples=60, deadline=None, database=None)


@pytest.mark.slow
@SLOW
@given(plan_cases())
def test_plan_samples_stay_inside_their_sequence_many(case):
    check_samples_follow_the_reference(case)


@pytest.mark.slow
@SLOW
@given(plan_cases())
def test_plan_statistics_match_the_batches_many(case):
    check_statistics_match_the_batches(case)


def samples_of(batches) -> list[tuple]:
    """Each row of each batch as the tuple of its (document, start, length) pieces."""
    out = []
    for b in batches:
        row, doc, start, length = b.pieces
        for r in range(b.rows):
            mine = row == r
            if mine.any():
                out.append(
                    tuple(
                        zip(
                            doc[mine].tolist(),
                            start[mine].tolist(),
                            length[mine].tolist(),
                            strict=True,
                        )
                    )
                )
    return out


def check_sharding(case, world: int, batch_size: int) -> None:
    lengths, cfg, epoch, mix = case
    plan = plan_of(lengths, cfg, epoch, **mix)
    expected = samples_of([plan_properties_batch(plan, np.arange(plan.n_samples))])
    per_rank = []
    for rank in range(world):
        sampler = PlanSampler(lambda e: plan, batch_size, rank, world, epoch=plan.epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        per_rank.append(samples_of(batches))
    got = Counter(s for rank in per_rank for s in rank)
    assert got == Counter(expected)  # complete, and each planned sample exactly once
    if not mix:  # (a weight above 1 repeats documents, hence identical samples, on purpose)
        assert all(n == 1 for n in got.values())


def plan_properties_batch(plan, ids):
    from packlm.data.epoch.sampler import BatchPieces

    return BatchPieces(len(ids), np.stack(plan.pieces(plan.sample_ids(ids))))


@FAST
@given(plan_cases(), st.integers(1, 4), st.integers(1, 5))
def test_ranks_together_yield_every_planned_sample_once(case, world, batch_size):
    check_sharding(case, world, batch_size)


@pytest.mark.slow
@SLOW
@given(plan_cases(), st.integers(1, 8), st.integers(1, 9))
def test_ranks_together_yield_every_planned_sample_once_many(case, world, batch_size):
    check_sharding(case, world, batch_size)
