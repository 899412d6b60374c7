"""Issue 59, family 1, through train.py as a user types it: a refused or killed command leaves
nothing a later command reads (the run's records, checkpoints, TensorBoard files), and a fresh
run never silently replaces a run's checkpoints (one line says how to resume it, where else to
write, or the key that replaces it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.runs import checkpoint_step, reliability_overrides, run_train
from packlm.runtime.run_folder import RunFolderTaken
from packlm.runtime.run_records import PENDING_PREFIX, record_at, run_records, timeline
from packlm.train import train

LOGS = ("job.log", ".run.lock")  # what a refused command may append to (read by no command)


def snapshot(folder: Path, logs: bool = False) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and (logs or p.name not in LOGS)
    }


def errors(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_train_refuses_a_fresh_run_into_a_folder_holding_checkpoints(compose_tiny, tmp_path):
    """train(cfg, run_dir) from Python too (and a sweep's job, which Hydra's run callback does
    not see): refused under the run lock, before any work; overwrite_run=true replaces it."""
    run = tmp_path / "run"
    train(compose_tiny("trainer.max_steps=2"), run_dir=run)
    last = run / "checkpoints" / "last.ckpt"
    before = snapshot(run)
    with pytest.raises(RunFolderTaken, match="overwrite_run=true"):
        train(compose_tiny("trainer.max_steps=3"), run_dir=run)
    assert snapshot(run) == before
    train(compose_tiny("trainer.max_steps=3", "overwrite_run=true"), run_dir=run)
    assert checkpoint_step(last) == 3
    assert len(list((run / "tb").glob("events.out.tfevents.*"))) == 1  # the new run's only


@pytest.mark.slow
def test_a_refused_resume_leaves_no_record_and_a_run_folder_is_never_replaced(
    tiny_corpus, cache_dir, tmp_path
):
    """The issue's two examples: `ckpt_path=R/checkpoints/last.ckpt data.stride=...` refused,
    then the plain resume the stop message prints; the launch command typed twice."""
    launch = reliability_overrides(tiny_corpus, cache_dir, "trainer.max_steps=4", "hydra.run.dir=R")
    first = run_train(launch, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    run, last = tmp_path / "R", tmp_path / "R" / "checkpoints" / "last.ckpt"
    before, files = snapshot(run, logs=True), snapshot(run)

    twice = run_train(launch, tmp_path)
    assert twice.returncode == 1, twice.stderr[-3000:]
    assert errors(twice) == [
        "error: R holds a run (checkpoints/last.ckpt): resume it with `python train.py "
        "ckpt_path=R/checkpoints/last.ckpt`, give the new run another folder "
        "(hydra.run.dir=...), or replace that run with overwrite_run=true"
    ]
    assert "Traceback" not in twice.stderr
    assert snapshot(run, logs=True) == before  # refused before Hydra wrote a byte

    refused = run_train(["ckpt_path=R/checkpoints/last.ckpt", "data.stride=8"], tmp_path)
    assert refused.returncode == 2 and len(errors(refused)) == 1, refused.stderr[-3000:]
    assert "data.stride" in errors(refused)[0]
    assert snapshot(run) == files  # no .hydra/resume-*, no pending record, no event file
    assert not list(run.glob(f"{PENDING_PREFIX}*"))

    # a resume killed before it was accepted leaves a pending record: read by no one
    killed = run / f"{PENDING_PREFIX}{dead_pid()}"
    killed.mkdir()
    OmegaConf.save(OmegaConf.create(["data.stride=8"]), killed / "overrides.yaml")

    resumed = run_train(["ckpt_path=R/checkpoints/last.ckpt", "trainer.max_steps=6"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]  # used to be refused like the first
    assert checkpoint_step(last) == 6
    assert [r.start_step for r in run_records(run)] == [0, 4]
    assert record_at(run, 5).config().trainer.max_steps == 6  # the config it trained with
    assert record_at(run, 5).config().data.stride == 16
    assert not killed.exists()


@pytest.mark.slow
def test_refused_commands_of_every_kind_leave_the_run_as_it_was(tiny_corpus, cache_dir, tmp_path):
    """Siblings: a resume refused for the model's shape (after the data is prepared), a missing
    checkpoint, a fresh run refused for its data; then overwrite_run=true replaces the run."""
    launch = reliability_overrides(tiny_corpus, cache_dir, "trainer.max_steps=3", "hydra.run.dir=R")
    assert run_train(launch, tmp_path).returncode == 0
    run = tmp_path / "R"
    before = snapshot(run)

    shape = run_train(["ckpt_path=R/checkpoints/last.ckpt", "model.n_embd=64"], tmp_path)
    assert shape.returncode != 0 and len(errors(shape)) == 1, shape.stderr[-3000:]
    assert "n_embd" in errors(shape)[0]
    assert snapshot(run) == before  # no record, no TensorBoard file, no checkpoint

    missing = run_train(["ckpt_path=R/checkpoints/nope.ckpt"], tmp_path)
    assert missing.returncode == 2 and "nope.ckpt" in errors(missing)[0]
    assert snapshot(run) == before
    assert not [p for p in tmp_path.rglob(".hydra*") if run not in p.parents]

    bad = run_train([*launch[:-1], "hydra.run.dir=X", f"data.sources=[{tmp_path}/none/*.txt]"],
                    tmp_path)  # fmt: skip
    assert bad.returncode == 1 and len(errors(bad)) == 1, bad.stderr[-3000:]
    assert not list((tmp_path / "X").glob(".hydra*"))  # no record of a run that never was
    fixed = run_train([*launch[:-1], "hydra.run.dir=X"], tmp_path)
    assert fixed.returncode == 0, fixed.stderr[-3000:]  # the same folder, now accepted

    old_events = {p.name for p in (run / "tb").rglob("events.out.tfevents.*")}
    again = run_train([*launch, "trainer.max_steps=2", "overwrite_run=true"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert checkpoint_step(run / "checkpoints" / "last.ckpt") == 2
    events = {p.name for p in (run / "tb").rglob("events.out.tfevents.*")}
    assert events and not events & old_events  # one run's curves, not two
    assert [r.start_step for r in timeline(run)] == [0]
    assert "replaces what an earlier run left there" in again.stdout + again.stderr


@pytest.mark.slow
def test_a_sweep_into_a_sweep_folder_that_holds_runs_is_refused(tiny_corpus, cache_dir, tmp_path):
    args = reliability_overrides(tiny_corpus, cache_dir, "trainer.max_steps=2",
                                 "hydra.sweep.dir=S", "data.stride=16,32")  # fmt: skip
    first = run_train(["-m", *args], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = sorted((tmp_path / "S").glob("*/checkpoints/last.ckpt"))
    assert len(runs) == 2
    before = {p: p.read_bytes() for p in runs}
    hydra_before = snapshot(runs[0].parent.parent / ".hydra")

    again = run_train(["-m", *args], tmp_path)
    assert again.returncode == 1 and len(errors(again)) == 1, again.stderr[-3000:]
    assert "overwrite_run=true" in errors(again)[0]
    assert {p: p.read_bytes() for p in runs} == before
    assert snapshot(runs[0].parent.parent / ".hydra") == hydra_before
    assert not list((tmp_path / "S").glob(f"*/{PENDING_PREFIX}*"))

    replaced = run_train(["-m", *args, "overwrite_run=true"], tmp_path)
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert all(checkpoint_step(p) == 2 for p in runs)
