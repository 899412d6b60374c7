"""A trace of a far step costs what finding that step costs, or is refused in one line
before any work: a mixture's epochs are all alike (closed form, no walk), a plain run's
epochs are walked from the start only up to `MAX_WALK` of them."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.plans import write_position_store
from packlm.commands.trace import Schedule, Tracer
from packlm.commands.trace.tracer import MAX_WALK
from packlm.config.data import DataConfig
from packlm.data.plans import EpochPlans
from packlm.data.store.prepared import PreparedData
from packlm.errors import ConfigError

LENGTHS = np.random.default_rng(4).integers(1, 40, size=70)
BASE = dict(window=8, stride=5, batch_size=3, shuffle=True, shuffle_documents=True, seed=11)
MIXTURE = dict(
    sources=["a", "b"],
    mixture_schedule=[
        {"step": 0, "shares": {"a": 0.8, "b": 0.2}},
        {"step": 3_000_000_000, "shares": {"b": 1}},
    ],
    mixture_interpolation="linear",
)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    train = write_position_store(root / "train", LENGTHS, (np.arange(70) % 2).tolist(), ["a", "b"])
    val = write_position_store(root / "val", LENGTHS[:5])
    return PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)


def tracer_of(prepared, built, **data):
    plans = EpochPlans(prepared=prepared, data=DataConfig.from_mapping({**BASE, **data}).validate())
    plan = plans.plan
    plans.plan = lambda *a, **k: built.append(a) or plan(*a, **k)  # epoch plans built
    return Tracer(plans, Schedule(world_size=2, accumulate=3))


def test_a_mixtures_far_step_is_found_in_closed_form(prepared):
    tracer = tracer_of(prepared, [], **MIXTURE)
    n = tracer.epoch_batches(0)
    steps = -(-n // 3)
    for step in (0, steps - 1, steps, 5 * steps + 1, 10**12):
        epoch, k = divmod(step, steps)
        assert tracer.step_batches(step) == [(epoch, b) for b in range(3 * k, min(n, 3 * k + 3))]
        assert tracer.plan_step_of(epoch, 3 * k) == step
    assert tracer._starts == [tracer._starts[0]]  # no epoch walked
    far = tracer.step_batches(10**9)[0]  # global batch ~3e9 of a ramp 9e9 long: not summed
    with pytest.raises(ConfigError, match=r"^global batch [\d,]+: a linear ramp of the mixture"):
        tracer.batch(*far)
    tracer.batch(*tracer.step_batches(10**5)[0])  # 3e5 steps into the ramp: summed
    with pytest.raises(ConfigError, match=r"^global batch \d+: a mixture of 6 rows"):
        tracer.batch(*tracer.step_batches(10**18)[0])


def test_a_plain_runs_step_past_the_epochs_a_trace_walks_is_refused_before_walking(prepared):
    built: list = []
    tracer = tracer_of(prepared, built)
    steps = -(-tracer.epoch_batches(0) // 3)
    assert tracer.step_batches(2 * steps)[0][0] == 2  # near: walked as before
    built.clear()
    for bad in (steps * (MAX_WALK + 2), 10**15):
        with pytest.raises(
            ConfigError, match=rf"^step={bad} \(epoch ~[\d,]+\) of the run: a trace"
        ):
            tracer.step_batches(bad)
    with pytest.raises(ConfigError, match=r"^epoch=1000000 of the run: a trace walks"):
        tracer.batch(10**6, 0)
    assert len(built) <= 2  # epoch 0 asked again at most: no walk towards the far epoch
