"""What a mixture costs follows the global batches asked for, never the steps a user types:
a schedule point far away, a budget never reached or a phase table of far phases cost the
same time and memory as near ones (memory measured with tracemalloc; no wall clock), and a
step past what int64 counts is refused in one line naming its key."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from helpers.plans import config
from packlm.config.mixture import mixture_points
from packlm.data.epoch.mixture.allocation import BLOCK, EXACT_RAMPS, Allocation, Q, horizon
from packlm.data.epoch.mixture.expected import MixtureRates, phase_table
from packlm.data.epoch.mixture.streams import SourceStreams, source_config, source_plan
from packlm.errors import ConfigError

SHARES = np.asarray([[0.7, 0.2, 0.1], [0.3, 0.2, 0.5], [0.5, 0.25, 0.25]])
MB = 1 << 20


def peak_bytes(work) -> int:
    """The peak of the memory Python and numpy allocate while `work` runs."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def whole_ramp_w(allocation: Allocation, u: np.ndarray) -> np.ndarray:
    """W as the allocation was first written: every ramp's parts summed in one cumsum."""
    steps, rows = allocation.steps.tolist(), allocation.rows
    at = [np.zeros(allocation.n, np.int64)]
    sums = []
    for i in range(len(steps) - 1):
        parts = allocation.parts(np.arange(steps[i], steps[i + 1]))
        sums.append(np.concatenate([np.zeros((1, allocation.n), np.int64), np.cumsum(parts, 0)]))
        at.append(at[-1] + rows * sums[-1][-1])
    out = []
    for v in u.tolist():
        i = int(np.searchsorted(steps, v, side="right") - 1)
        if i < len(steps) - 1:
            out.append(at[i] + rows * sums[i][v - steps[i]])
        else:
            out.append(at[i] + rows * allocation.parts(np.asarray([v]))[0] * (v - steps[i]))
    return np.asarray(out)


@pytest.mark.parametrize("ends", [(2 * BLOCK, 2 * BLOCK + 3), (BLOCK - 1, 3 * BLOCK + 7)])
def test_a_ramp_summed_block_by_block_gives_the_rows_of_the_whole_ramp(ends):
    """The plan is unchanged: the same W (and so the same rows) as one sum over each ramp,
    on both sides of every block boundary and at the points themselves."""
    allocation = Allocation([0, *ends], SHARES, True, 5)
    edges = np.asarray([k * BLOCK + d for k in range(5) for d in (-2, -1, 0, 1)] + list(ends))
    u = np.unique(np.concatenate([edges[edges >= 0], np.arange(0, 50), [ends[-1] + 1000]]))
    for order in (u, u[::-1]):  # blocks reached forwards, and from the far end first
        fresh = Allocation([0, *ends], SHARES, True, 5)
        assert (fresh.w(order) == whole_ramp_w(allocation, order)).all()
    rows = allocation.rows_before(u)
    assert (rows.sum(axis=1) == 5 * u).all()
    assert (rows[1:] >= rows[:-1]).all()


def test_a_linear_point_three_billion_steps_away_costs_only_the_batches_dealt():
    """The issue's example: numpy was asked for 22 GiB before the first batch."""
    schedule = [
        {"step": 0, "shares": {"a": 0.7, "b": 0.3}},
        {"step": 3_000_000_000, "shares": {"a": 0.2, "b": 0.8}},
    ]
    cfg = config(
        sources=["a.txt", "b.txt"], mixture_schedule=schedule, mixture_interpolation="linear"
    )
    held = {}

    def run():
        allocation = Allocation.of(cfg, 32, accumulate=4)
        held["rows"] = allocation.rows_of(np.arange(0, 3000))  # the first 750 steps
        held["late"] = allocation.rows_of(np.asarray([10**6]))  # a run's millionth batch
        held["allocation"] = allocation

    assert peak_bytes(run) < 32 * MB
    assert (held["rows"].sum(axis=1) == 32).all()
    assert held["rows"][:, 0].sum() == pytest.approx(0.7 * 32 * 3000, abs=2)
    (ramp,) = held["allocation"]._ramps.values()
    assert len(ramp._starts) <= 1 + 10**6 // BLOCK + 1  # block sums up to the batch asked


def test_a_ramp_of_ten_million_steps_costs_what_its_first_batches_cost():
    """The issue: a ramp of 1e7 steps took 11 s and 2.1 GB before training began."""
    short = peak_bytes(lambda: Allocation([0, 1000], SHARES[:2], True, 8).rows_of(np.arange(500)))
    long = peak_bytes(lambda: Allocation([0, 10**7], SHARES[:2], True, 8).rows_of(np.arange(500)))
    assert long < short + 16 * MB


def test_expectations_of_a_long_ramp_are_closed_form_and_within_their_bound():
    length = EXACT_RAMPS + 3 * BLOCK  # just past the exact ones: T itself is still cheap here
    allocation = Allocation([0, length, length + 500], SHARES, True, 32)
    assert not allocation.exact_expectations
    u = np.asarray([0, 1, 777, BLOCK + 5, length - 1, length, length + 250, length + 10**6])
    estimate, exact = allocation.expected_target(u), allocation.target(u)
    assert (np.abs(estimate - exact) <= 32 * u[:, None] / Q + 1e-6).all()
    assert allocation._ramps[0]._starts[-1].sum() > 0  # T above was summed; the estimate was not
    fresh = Allocation([0, length, length + 500], SHARES, True, 32)
    assert peak_bytes(lambda: fresh.expected_target(u)) < 1 * MB
    assert not fresh._ramps  # no ramp step was summed for it
    near = Allocation([0, 300, 800], SHARES, True, 32)
    assert near.exact_expectations
    assert (near.expected_target(u) == near.target(u)).all()  # unchanged where it is cheap


def streams_of(cfg, rows, built):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, size=60).astype(np.int64)
    sources = np.repeat([0, 1], [50, 10])  # b: ten short documents, read pass after pass
    docs = [np.flatnonzero(sources == s) for s in range(2)]
    mine = [source_config(cfg, s) for s in range(2)]

    def plan_of(s, p):
        built.append((s, p))
        return source_plan(lengths, mine[s], p, docs[s])

    return SourceStreams(plan_of, ["a", "b"], Allocation.of(cfg, rows), cfg.seed)


@pytest.mark.parametrize("interpolation", ["constant", "linear"])
def test_stats_of_a_point_far_away_builds_no_pass_but_the_first(interpolation):
    """The issue: with constant interpolation, stats counted the small source's passes up
    to step 3e9 for minutes (each a plan); now the passes are expected from pass 0."""
    schedule = [
        {"step": 0, "shares": {"a": 0.7, "b": 0.3}},
        {"step": 3_000_000_000, "shares": {"a": 0.2, "b": 0.8}},
    ]
    cfg = config(
        sources=["a.txt", "b.txt"], mixture_schedule=schedule, batch_size=4,
        mixture_interpolation=interpolation,
    )  # fmt: skip
    built: list[tuple[int, int]] = []
    streams = streams_of(cfg, 4, built)
    table = {}
    assert peak_bytes(lambda: table.update(phase_table(streams, np.asarray([3.0, 5.0])))) < 8 * MB
    assert {p for _, p in built} == {0}
    first, last = table["phases"]
    key = "rows" if interpolation == "constant" else "expected_rows"
    assert sum(first[key].values()) == pytest.approx(4 * 3_000_000_000, abs=1)
    samples = table["sources"]["b"]["pass_samples"]
    assert first["expected_passes"]["b"] == pytest.approx(first[key]["b"] / samples, rel=1e-6)
    assert sum(last[f"{key}_per_step"].values()) == pytest.approx(4)


def test_a_token_budget_never_reached_costs_nothing_and_stays_finite():
    """The horizon of an unreachable budget: doubling up to 2^40 global batches, once past
    the last point in float (W there no longer fits in int64)."""
    allocation = Allocation([0, 3_000_000_000], SHARES[:2], True, 256)
    assert 3_000_000_000 <= allocation.horizon < 2**40
    rates = MixtureRates.__new__(MixtureRates)
    rates.allocation, rates.per_row = allocation, np.asarray([10.0, 20.0, 30.0])
    got = {}
    assert peak_bytes(lambda: got.update(b=rates.batches(1e30))) < 1 * MB
    assert np.isfinite(got["b"]) and got["b"] >= 2**39
    assert not allocation._ramps
    constant = Allocation([0, 10], SHARES[:2], False, 256)
    rates.allocation = constant
    assert rates.batches(1e30) >= 2**39  # W past the horizon would have wrapped around


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (2**63, r"data\.mixture_schedule\[1\]\.step=9223372036854775808: past the last step"),
        (10**30, r"data\.mixture_schedule\[1\]\.step=1000000000000000000000000000000: past"),
        (horizon(64, 2) // 2 + 1, r"data\.mixture_schedule\[1\]\.step=\d+: past the last step"),
    ],
)
def test_a_step_past_what_int64_counts_is_refused_naming_the_point(step, message):
    schedule = [{"step": 0, "shares": {"a": 1.0}}, {"step": step, "shares": {"b": 1.0}}]
    cfg = config(sources=["a.txt", "b.txt"], mixture_schedule=schedule)
    mixture_points(cfg)  # the config itself is valid: the batch size sets the limit
    with pytest.raises(ConfigError, match=message) as caught:
        Allocation.of(cfg, 64, accumulate=2)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300
    schedule[1]["step"] = horizon(64, 2) // 2  # the last step it counts is dealt
    assert (
        Allocation.of(cfg, 64, accumulate=2).rows_of(np.asarray([2 * schedule[1]["step"]]))[0, 1]
        == 64
    )


def test_the_last_countable_batch_is_dealt_and_the_next_refused():
    allocation = Allocation([0, 5], SHARES[:2], False, 1 << 12)
    last = allocation.horizon
    rows = allocation.rows_of(np.asarray([last]))
    assert rows.sum() == 1 << 12 and (rows >= 0).all()
    for bad in (last + 1, 2**62, -1):
        with pytest.raises(ConfigError, match=rf"global batch {bad}: a mixture of 4096 rows"):
            allocation.rows_of(np.asarray([bad]))


@pytest.mark.parametrize("step", [3e9, 1.0, -5, True, "3000000000", None])
def test_a_schedule_step_that_is_not_a_whole_number_is_refused(step):
    schedule = [{"step": 0, "shares": {"a": 1.0}}, {"step": step, "shares": {"b": 1.0}}]
    with pytest.raises(ConfigError, match=r"^data\.mixture_schedule\[1\]\.step=.*an integer"):
        mixture_points(config(sources=["a.txt", "b.txt"], mixture_schedule=schedule))


def test_a_long_run_keeps_only_the_passes_its_rows_span_and_deals_the_same_rows(monkeypatch):
    """A small source read pass after pass: the counted passes are let go once behind the
    rows dealt (memory of the passes a batch spans, not of every pass of the run)."""
    schedule = [{"step": 0, "shares": {"a": 0.5, "b": 0.5}}]
    cfg = config(sources=["a.txt", "b.txt"], mixture_schedule=schedule, batch_size=8)
    kept, reference = streams_of(cfg, 8, []), streams_of(cfg, 8, [])
    monkeypatch.setattr(reference, "_drop_before", lambda source, row: None)
    slots = np.arange(8)
    for g in range(0, 1500, 7):
        assert np.array_equal(kept.pieces(g, slots), reference.pieces(g, slots))
    assert reference._first[1] == 0 and len(reference._counts[1]) > 50
    assert len(kept._counts[1]) <= 3 and kept._first[1] > 50
    for g in (3, 700, 20):  # earlier batches again (a trace): counted back or on from pass 0
        assert np.array_equal(kept.pieces(g, slots), reference.pieces(g, slots))


def test_a_row_a_million_passes_away_is_refused_before_any_pass_is_counted():
    """A trace of a far step from the config alone counted a small source's passes for
    hours (4.9 GB at step 2e9); now one line naming the source, before counting."""
    schedule = [{"step": 0, "shares": {"a": 0.5, "b": 0.5}}]
    cfg = config(sources=["a.txt", "b.txt"], mixture_schedule=schedule, batch_size=8)
    built: list[tuple[int, int]] = []
    streams = streams_of(cfg, 8, built)
    with pytest.raises(ConfigError, match=r"^the mixture source 'a': the row asked is about") as e:
        streams.pieces(10**9, np.arange(8))
    assert "\n" not in str(e.value) and {p for _, p in built} == {0}
    near = streams.pieces(2000, np.arange(8))  # nearer rows still count on as before
    assert near.shape[0] == 4 and near.shape[1] > 0
