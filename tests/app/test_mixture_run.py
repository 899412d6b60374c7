"""A mixture by share through train.py's config: TensorBoard shows each source's realized
share of supervised tokens next to its target, `python -m packlm.stats` its expected tokens
per phase, and a resume under another schedule is refused before any work."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from packlm.checkpoint.contents import read_checkpoint
from packlm.commands.stats import statistics
from packlm.commands.trace.own_store import loader_state
from packlm.commands.trace.run import tracer_of
from packlm.errors import ConfigError
from packlm.train import train


def mixture(corpus: Path, change: int = 4) -> tuple[str, ...]:
    """Two sources of the tiny corpus (10 and 50 files), 70/30 then 20/80 from `change`."""
    return (
        f"data.sources=[{{path: '{corpus}/doc00*.txt', name: small}},"
        f" {{path: '{corpus}/doc0[1-5]*.txt', name: big}}]",
        f"data.mixture_schedule=[{{step: 0, shares: {{small: 0.7, big: 0.3}}}},"
        f" {{step: {change}, shares: {{small: 0.2, big: 0.8}}}}]",
    )


def scalars(run: Path, tag: str, sub: str = "") -> dict[int, float]:
    acc = EventAccumulator(str(run / "tb" / sub), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def scalar_tags(run: Path, sub: str = "") -> set[str]:
    acc = EventAccumulator(str(run / "tb" / sub), size_guidance={"scalars": 0})
    acc.Reload()
    return set(acc.Tags()["scalars"])


def test_tensorboard_shows_realized_and_target_shares_and_stats_the_phases(
    compose_tiny, tiny_corpus, tmp_path, monkeypatch
):
    cfg = compose_tiny(
        *mixture(tiny_corpus), "trainer.max_steps=8", "train.validate_at_end=false",
        "trainer.log_every_n_steps=5",
    )  # fmt: skip
    run = tmp_path / "run"
    train(cfg, run_dir=run)
    for name, before, after in (("small", 0.7, 0.2), ("big", 0.3, 0.8)):
        # one tag, two sub-runs: TensorBoard draws both lines on the card Mixture/<name>
        target = scalars(run, f"Mixture/{name}", "mixture_target")
        share = scalars(run, f"Mixture/{name}", "mixture_share")
        assert set(target) == set(share) == set(range(8))  # every step, not every 5th
        # the switch at step 4 is at step 4 exactly: a jump between points 3 and 4
        assert [target[s] for s in range(8)] == pytest.approx([before] * 4 + [after] * 4)
        early = np.mean([share[s] for s in share if s < 4])
        late = np.mean([share[s] for s in share if s >= 4])
        assert (early > 0.5) == (before > 0.5) and (late > 0.5) == (after > 0.5)
    for s in range(8):  # the realized shares of a step sum to 1
        assert scalars(run, "Mixture/small", "mixture_share")[s] + scalars(
            run, "Mixture/big", "mixture_share"
        )[s] == pytest.approx(1.0)
    tags = scalar_tags(run)
    assert {"Loss/train_by_source/small", "Loss/train_by_source/big"} <= tags
    assert {"tokens/supervised_by_source/small", "data/source/big/samples"} <= tags
    assert not any(t.lower().startswith("mixture/") for t in tags)  # only in the sub-runs

    elsewhere = tmp_path / "elsewhere"  # the working directory of the default cache
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # python -m packlm.trace on a run started from Python (no .hydra/config.yaml): the run's
    # own stores, found through the checkpoint, not rebuilt in the default cache
    tracer = tracer_of(run / "checkpoints" / "last.ckpt")
    assert not any(elsewhere.iterdir())
    # the checkpoint's resume point (each source's pass): the steps before it counted back
    point = loader_state(read_checkpoint(run / "checkpoints" / "last.ckpt"))["mixture_passes"]
    counted = tracer_of(run / "checkpoints" / "last.ckpt")
    counted.streams.resume_from(dict.fromkeys(point, [0, 0]))  # every pass from the first
    for step in (3, 4):
        ((epoch, batch),) = tracer.step_batches(step)
        trace = tracer.batch(epoch, batch)
        rows = Counter(r["mixture"]["source"] for r in trace["rows"])
        assert rows == {k: v for k, v in trace["mixture_rows"].items() if v}
        assert trace["mixture_shares"]["small"] == (0.7 if step < 4 else 0.2)
        assert trace["rows"] == counted.batch(epoch, batch)["rows"]

    out = statistics(compose_tiny(*mixture(tiny_corpus)))["mixture"]
    first, last = out["phases"]
    assert (first["from_step"], first["to_step"], last["to_step"]) == (0, 4, None)
    assert sum(first["rows"].values()) == 4 * out["rows_per_global_batch"]
    assert first["rows"]["small"] > first["rows"]["big"]
    per_row = out["sources"]["small"]["supervised_per_row"]
    assert first["supervised_tokens"]["small"] == pytest.approx(
        first["rows"]["small"] * per_row, abs=0.1
    )
    assert last["rows_per_step"]["big"] > last["rows_per_step"]["small"]

    last_ckpt = run / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"data\.mixture_schedule.*mixture_change_on_resume"):
        train(compose_tiny(*mixture(tiny_corpus, change=5), f"ckpt_path={last_ckpt}"))


def test_a_resumed_runs_sub_runs_purge_what_the_killed_run_logged_past_its_checkpoint(tmp_path):
    from packlm.train.tensorboard import RunTensorBoard

    def log(purge_step, steps):
        board = RunTensorBoard(tmp_path, name="", version="", purge_step=purge_step)
        for step in steps:
            board.sub_writer("mixture_share").add_scalar("Mixture/web", step, global_step=step)
        board.finalize("success")

    log(None, range(8))  # killed after step 8, its checkpoint at step 4
    log(4, range(4, 10))  # the resume logs steps 4.. again
    acc = EventAccumulator(str(tmp_path / "mixture_share"), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars("Mixture/web")]
    assert steps == list(range(10))
