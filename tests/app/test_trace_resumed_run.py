"""Tools explain a step with the settings the run trained it with, through every resume that
changed one (issue 59, family 2): after a resume that changed the mixture schedule
(`data.mixture_change_on_resume=true`), `python -m packlm.trace R step=6` explained the first
launch's schedule, and tracing the checkpoint explained the new one for the steps before the
resume too. Checked against the rows each step really trained (their hashes)."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from helpers.runs import checkpoint_step, reliability_overrides, run_train
from packlm.callbacks.batch_hashes import ENV, BatchHashes, read_batch_hashes
from packlm.commands.compare import _overrides
from packlm.commands.trace.run import tracer_of
from packlm.runtime import run_records
from packlm.runtime.run_records import record_at
from packlm.train import train

LAUNCH_SCHEDULE = (
    "data.mixture_schedule=[{step: 0, shares: {small: 0.7, big: 0.3}},"
    " {step: 4, shares: {small: 0.2, big: 0.8}}]"
)
RESUME_SCHEDULE = (  # changes a point before the resume step too: every step tells them apart
    "data.mixture_schedule=[{step: 0, shares: {small: 0.5, big: 0.5}},"
    " {step: 6, shares: {small: 0.1, big: 0.9}}]"
)


def sources(corpus: Path) -> str:
    return (
        f"data.sources=[{{path: '{corpus}/doc00*.txt', name: small}},"
        f" {{path: '{corpus}/doc0[1-5]*.txt', name: big}}]"
    )


def trained_rows(hashes: Path) -> dict[int, Counter]:
    """global step -> the hashes of the rows it trained (the last run of a step wins)."""
    return {step: Counter(rows) for step, _, _, _, rows in read_batch_hashes(hashes)}


def traced_rows(target: Path, step: int, settings_of: int | None = None) -> Counter:
    """The rows `python -m packlm.trace <target> step=<step>` explains; `settings_of`: trace
    with the settings of another step instead (what a tool reading one config did)."""
    tracer = tracer_of(target, step=step if settings_of is None else settings_of)
    ((epoch, batch),) = tracer.step_batches(step)
    rows = tracer.batch(epoch, batch)["rows"]
    return Counter(
        hashlib.sha1(np.asarray(r["input_ids"], dtype=np.int64).tobytes()).hexdigest()[:12]
        for r in rows
    )


def test_trace_explains_every_step_with_the_schedule_it_trained(
    compose_tiny, tiny_corpus, tmp_path, monkeypatch
):
    run, hashes = tmp_path / "run", tmp_path / "hashes.txt"
    launch = [sources(tiny_corpus), LAUNCH_SCHEDULE, "trainer.max_steps=4"]
    cfg = compose_tiny(*launch)
    (run / ".hydra").mkdir(parents=True)  # the launch record, as train.py leaves it
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(launch), run / ".hydra" / "overrides.yaml")
    train(cfg, run_dir=run, callbacks=[BatchHashes(hashes)])
    last = run / "checkpoints" / "last.ckpt"

    resume = [RESUME_SCHEDULE, "data.mixture_change_on_resume=true", "trainer.max_steps=8"]
    pending = tmp_path / "pending"  # what Hydra writes for `python train.py ckpt_path=... <resume>`
    pending.mkdir()
    OmegaConf.save(OmegaConf.create([f"ckpt_path={last}", *resume]), pending / "overrides.yaml")
    monkeypatch.setattr(run_records, "_pending_of_this_process", lambda: pending)
    train(compose_tiny(*launch, *resume, f"ckpt_path={last}"), callbacks=[BatchHashes(hashes)])
    assert checkpoint_step(last) == 8 and record_at(run).start_step == 4  # train() committed it

    trained = trained_rows(hashes)
    assert sorted(trained) == list(range(8))
    for step in range(8):
        assert traced_rows(run, step) == trained[step], f"run dir, step {step}"
        assert traced_rows(last, step) == trained[step], f"checkpoint, step {step}"
    # what a tool reading one config explained: the launch's after the resume, the
    # checkpoint's before it (the test tells the two apart at every step)
    assert all(traced_rows(run, s, settings_of=0) != trained[s] for s in (4, 5, 6, 7))
    assert all(traced_rows(last, s, settings_of=7) != trained[s] for s in (0, 1, 2, 3))


def test_compare_shows_the_settings_a_run_ended_with(tmp_path):
    run = tmp_path / "run"
    for path, overrides, step in (
        (run / ".hydra", ["data.window=32", "trainer.max_steps=4"], None),
        (run / ".hydra" / "resume-2026-01-01_00-00-01", ["ckpt_path=x", "trainer.max_steps=8"], 4),
        (run / ".hydra" / "resume-2026-01-01_00-00-02", ["trainer.max_steps=99"], None),  # old
    ):
        path.mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(overrides), path / "overrides.yaml")
        if step is not None:
            (path / "resume.yaml").write_text(f"step: {step}\n")
    assert _overrides(run) == {"data.window": "32", "trainer.max_steps": "8"}


@pytest.mark.slow
def test_the_issues_example_through_train_py_trace_and_stats(
    tiny_corpus, tmp_path_factory, tmp_path
):
    """`python train.py ... hydra.run.dir=R`, resumed with another schedule, then
    `python -m packlm.trace R step=6` and `python -m packlm.stats ckpt_path=...`."""
    import json
    import subprocess
    import sys

    from helpers.runs import subprocess_env

    hashes, cache_dir = tmp_path / "hashes.txt", tmp_path_factory.getbasetemp() / "cache"
    launch = reliability_overrides(tiny_corpus, cache_dir, sources(tiny_corpus), LAUNCH_SCHEDULE,
                                   "trainer.max_steps=4", "hydra.run.dir=R")  # fmt: skip
    assert run_train(launch, tmp_path, **{ENV: str(hashes)}).returncode == 0
    resumed = run_train(["ckpt_path=R/checkpoints/last.ckpt", RESUME_SCHEDULE,
                         "data.mixture_change_on_resume=true", "trainer.max_steps=8"],
                        tmp_path, **{ENV: str(hashes)})  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    trained = trained_rows(hashes)

    def tool(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, env=subprocess_env(),
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    for step in (2, 6):
        (trace,) = json.loads(tool("packlm.trace", "R", f"step={step}", "--json"))
        assert trace["mixture_shares"] == ({"small": 0.7, "big": 0.3} if step < 4 else
                                           {"small": 0.1, "big": 0.9})  # fmt: skip
        rows = [np.asarray(r["input_ids"], dtype=np.int64).tobytes() for r in trace["rows"]]
        assert Counter(hashlib.sha1(r).hexdigest()[:12] for r in rows) == trained[step]
    stats = json.loads(tool("packlm.stats", "ckpt_path=R/checkpoints/last.ckpt"))
    shares = [phase["shares"] for phase in stats["mixture"]["phases"]]
    assert shares == [{"small": 0.5, "big": 0.5}, {"small": 0.1, "big": 0.9}]  # not the launch's
