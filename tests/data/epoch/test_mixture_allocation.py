"""The rows a mixture gives each source per global batch (`Allocation`): the guarantee its
docstring states, as a property over random shares, batch sizes and schedules."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packlm.data.epoch.mixture.allocation import Allocation, Q, quantize


@st.composite
def schedules(draw):
    n = draw(st.integers(1, 5))
    rows = draw(st.integers(1, 40))
    points = draw(st.integers(1, 4))
    steps = [
        0,
        *sorted(draw(st.sets(st.integers(1, 300), min_size=points - 1, max_size=points - 1))),
    ]
    shares = []
    for _ in steps:
        raw = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
        raw[draw(st.integers(0, n - 1))] += 1  # never all zero
        shares.append(np.asarray(raw, dtype=np.float64) / sum(raw))
    linear = draw(st.booleans())
    start = draw(st.integers(0, 10**6))
    return Allocation(steps, np.asarray(shares), linear, rows), start


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_every_source_stays_within_its_bound_of_the_target_and_batches_are_whole(case):
    allocation, start = case
    n, rows = allocation.n, allocation.rows
    u = np.concatenate([np.arange(0, 400), start + np.arange(0, 50)])
    before = allocation.rows_before(u)  # [m, n]
    target = allocation.target(u)
    assert (before.sum(axis=1) == rows * u).all()  # every batch has exactly its B rows
    assert (before >= np.floor(target)).all()  # never a whole row behind
    assert (before - target < max(1, n - 1)).all()
    each = allocation.rows_of(np.arange(0, 399))  # [k, n]
    assert (each >= 0).all() and (each.sum(axis=1) == rows).all()
    assert (np.cumsum(each, axis=0) == before[1:400]).all()  # the same rows, batch by batch
    # any k consecutive batches: within n rows of the target (2 with two sources)
    for k in (1, 7, 10, 50):
        got = before[k:400] - before[: 400 - k]
        want = target[k:400] - target[: 400 - k]
        assert (np.abs(got - want) < max(2, n)).all()


@settings(max_examples=60, deadline=None)
@given(schedules(), st.integers(0, 2000))
def test_a_batch_computed_alone_is_the_batch_of_the_whole_run(case, step):
    allocation, _ = case
    alone = allocation.rows_of(np.asarray([step]))[0]
    run = allocation.rows_of(np.arange(0, step + 1))[-1]
    assert (alone == run).all()


def test_two_sources_stay_within_one_row_of_the_target():
    allocation = Allocation([0, 50], np.asarray([[0.7, 0.3], [0.1, 0.9]]), True, 3)
    u = np.arange(2000)
    error = allocation.rows_before(u) - allocation.target(u)
    assert (np.abs(error) < 1).all()
    assert np.abs(error).max() > 0.5  # the bound is not met trivially


def test_a_later_schedule_change_leaves_the_earlier_batches_as_they_were():
    """What data.mixture_change_on_resume relies on: only the steps after a change move."""
    before = Allocation([0, 100], np.asarray([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]]), False, 8)
    after = Allocation(
        [0, 100, 150], np.asarray([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [1, 0, 0]]), False, 8
    )
    u = np.arange(0, 150)
    assert (before.rows_before(u) == after.rows_before(u)).all()
    assert (before.rows_before(u + 100) != after.rows_before(u + 100)).any()


def test_shares_become_parts_that_sum_to_q_exactly():
    shares = np.random.default_rng(0).dirichlet(np.ones(7), size=100)
    parts = quantize(shares)
    assert (parts.sum(axis=1) == Q).all()
    assert (np.abs(parts / Q - shares) < 1 / Q).all()
