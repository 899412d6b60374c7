"""Property tests of the plan over random store shapes and configs."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from helpers.plan_properties import (
    check_samples_follow_the_reference,
    check_statistics_match_the_batches,
    plan_cases,
)

FAST = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@FAST
@given(plan_cases())
def test_samples_follow_the_reference_and_stay_inside_their_sequence(case):
    check_samples_follow_the_reference(case)


@FAST
@given(plan_cases())
def test_statistics_match_the_batches(case):
    check_statistics_match_the_batches(case)


@FAST
@given(plan_cases())
def test_statistics_match_the_batches_with_snapped_windows(case):
    from dataclasses import replace

    lengths, cfg, epoch, mix = case
    if cfg.stride > 1:
        cfg = replace(cfg, snap="document", snap_tolerance=cfg.stride - 1).validate()
    check_statistics_match_the_batches((lengths, cfg, epoch, mix))
