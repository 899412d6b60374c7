"""A run folder's records (packlm.runtime.run_records): only accepted commands write them, each
resume knows the step it started at, and a fresh run never silently replaces a run's
checkpoints (issue 59, family 1). No training here: folders are laid out as the commands
leave them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from packlm.runtime import run_records
from packlm.runtime.run_folder import RunFolderTaken, check_fresh_folder
from packlm.runtime.run_records import (
    PENDING_PREFIX,
    commit,
    discard_pending,
    overrides_in_force,
    pending_subdir,
    record_at,
    timeline,
)
from packlm.runtime.run_records import (
    run_records as records_of,
)
from packlm.train.resume_config import run_overrides


def write_record(path: Path, overrides: list[str], step=None, config: dict | None = None) -> Path:
    path.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(overrides), path / "overrides.yaml")
    OmegaConf.save(OmegaConf.create(config or {"seed": 1}), path / "config.yaml")
    if step is not None:
        (path / "resume.yaml").write_text(step if isinstance(step, str) else f"step: {step}\n")
    return path


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def run(tmp_path) -> Path:
    """A run launched with max_steps=4 and resumed at step 4 (max_steps=8), then at 6 (16)."""
    run = tmp_path / "run"
    write_record(run / ".hydra", ["experiment=tiny", "trainer.max_steps=4"])
    write_record(
        run / ".hydra/resume-2026-01-01_00-00-01", ["ckpt_path=x", "trainer.max_steps=8"], 4
    )
    write_record(
        run / ".hydra/resume-2026-01-01_00-00-02", ["ckpt_path=x", "trainer.max_steps=16"], 6
    )
    return run


def test_the_record_in_force_at_a_step_is_the_last_one_started_at_or_before_it(run):
    starts = [record_at(run, s).start_step for s in range(10)]
    assert starts == [0, 0, 0, 0, 4, 4, 6, 6, 6, 6]
    assert record_at(run).start_step == 6  # no step: the run's last
    assert overrides_in_force(run)[-1] == "trainer.max_steps=16"


def test_a_resume_from_an_earlier_step_replaces_the_records_it_trained_again(run):
    write_record(run / ".hydra/resume-2026-01-01_00-00-03", ["trainer.max_steps=32"], 5)
    assert [r.start_step for r in timeline(run)] == [0, 4, 5]  # the one from 6 is gone
    assert record_at(run, 9).path.name.endswith("00-00-03")
    assert record_at(run, 4).path.name.endswith("00-00-01")


@pytest.mark.parametrize("damaged", ["step: -1\n", "step: five\n", "step: true\n", "[1, 2\n",
                                     "", "\x00\xff", "step: 1.5\n"])  # fmt: skip
def test_a_record_without_a_sound_start_step_explains_no_step(run, damaged):
    write_record(run / ".hydra/resume-2026-01-01_00-00-03", ["trainer.max_steps=99"], damaged)
    assert [r.start_step for r in timeline(run)] == [0, 4, 6]  # never at step 0 or a guess
    # an older packlm's record (no step) still gives its overrides to a resume, as before
    assert run_overrides(run)[-1] == "trainer.max_steps=99"


def test_a_folder_without_records_has_none(tmp_path):
    assert records_of(tmp_path) == [] and record_at(tmp_path, 3) is None
    assert run_overrides(tmp_path) is None and overrides_in_force(tmp_path) == []
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 3\n")  # train(cfg) after a test
    assert record_at(tmp_path, 0).config().seed == 3  # wrote it "as Hydra saves it"
    assert run_overrides(tmp_path) is None  # no overrides: resumed with the command line's


def pending_in(folder: Path, monkeypatch, overrides=("data.stride=8",)) -> Path:
    pending = write_record(folder / f"{PENDING_PREFIX}{os.getpid()}", list(overrides))
    monkeypatch.setattr(run_records, "_pending_of_this_process", lambda: pending)
    return pending


def test_a_resume_record_is_made_only_by_commit_with_the_config_it_trains(run, monkeypatch):
    pending = pending_in(run, monkeypatch, ["ckpt_path=x", "trainer.max_steps=20"])
    assert run_overrides(run)[-1] == "trainer.max_steps=16"  # pending: read by nobody
    assert record_at(run, 100).start_step == 6
    merged = OmegaConf.create({"trainer": {"max_steps": 20}, "data": {"window": 32}})
    commit(run, merged, 7)
    assert not pending.exists()
    last = record_at(run)
    assert last.start_step == 7 and last.config() == merged  # not Hydra's command-line config
    assert run_overrides(run)[-1] == "trainer.max_steps=20"
    pending_in(run, monkeypatch, ["ckpt_path=x"])
    commit(run, merged, 7)  # a second resume in the same second: a record of its own
    assert len(records_of(run)) == 5 and [r.start_step for r in timeline(run)] == [0, 4, 6, 7]


def test_a_refused_command_discards_its_pending_record_and_only_that(run, monkeypatch):
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    pending = pending_in(run, monkeypatch)
    discard_pending()
    assert not pending.exists()
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    monkeypatch.setattr(run_records, "_pending_of_this_process", lambda: None)
    discard_pending()  # not a Hydra command: nothing to remove
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before


def test_pending_records_of_killed_commands_go_at_the_next_commit_live_ones_stay(run, monkeypatch):
    dead = write_record(run / f"{PENDING_PREFIX}{dead_pid()}", ["data.stride=8"])
    live = write_record(run / f"{PENDING_PREFIX}{os.getppid()}", ["data.stride=8"])
    odd = write_record(run / f"{PENDING_PREFIX}abc", ["data.stride=8"])
    assert "data.stride=8" not in run_overrides(run)  # never read, before or after
    pending_in(run, monkeypatch, ["ckpt_path=x"])
    commit(run, OmegaConf.create({}), 8)
    assert not dead.exists() and live.exists() and odd.exists()
    assert "data.stride=8" not in run_overrides(run)


def test_a_fresh_run_replaces_an_earlier_runs_files_and_only_those(tmp_path, monkeypatch):
    run = tmp_path / "run"
    write_record(run / ".hydra/resume-2026-01-01_00-00-01", ["data.stride=8"], 4)  # old run's
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"old")
    (run / "checkpoints" / "notes.txt").write_text("mine")
    (run / "tb" / "by_tokens").mkdir(parents=True)
    (run / "tb" / "events.out.tfevents.1.host.1.0").write_bytes(b"old")
    (run / "tb" / "by_tokens" / "events.out.tfevents.1.host.1.1").write_bytes(b"old")
    (run / "job.log").write_text("old lines\n")
    pending = pending_in(run, monkeypatch, ["trainer.max_steps=3"])
    commit(run, OmegaConf.create({}), None)
    assert not pending.exists()
    assert [r.start_step for r in records_of(run)] == [0]  # the old resume record is gone
    assert run_overrides(run) == ["trainer.max_steps=3"]
    left = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert left == [".hydra/config.yaml", ".hydra/overrides.yaml", "checkpoints/notes.txt",
                    "job.log"]  # fmt: skip


def test_a_fresh_run_started_from_python_keeps_the_callers_hydra_folder(tmp_path, monkeypatch):
    write_record(tmp_path / ".hydra", ["seed=3"])
    monkeypatch.setattr(run_records, "_pending_of_this_process", lambda: None)
    commit(tmp_path, OmegaConf.create({}), None)
    assert run_overrides(tmp_path) == ["seed=3"]


def test_a_folder_holding_checkpoints_is_refused_to_a_fresh_run_with_the_way_out(tmp_path):
    check_fresh_folder(tmp_path / "new")  # nothing there
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "README").write_text("not a checkpoint")
    check_fresh_folder(tmp_path)
    (tmp_path / "checkpoints" / "best-step4.ckpt").write_bytes(b"x")
    with pytest.raises(RunFolderTaken, match="best-step4.ckpt"):
        check_fresh_folder(tmp_path)
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    with pytest.raises(RunFolderTaken) as refused:
        check_fresh_folder(tmp_path)
    message = str(refused.value)
    assert "\n" not in message
    assert f"python train.py ckpt_path={tmp_path}/checkpoints/last.ckpt" in message
    assert "hydra.run.dir=" in message and "overwrite_run=true" in message


def test_ranks_above_zero_write_no_pending_record(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert pending_subdir() == f"{PENDING_PREFIX}{os.getpid()}"
    monkeypatch.setenv("RANK", "0")
    assert pending_subdir() == f"{PENDING_PREFIX}{os.getpid()}"
    monkeypatch.setenv("RANK", "3")
    assert pending_subdir() is None
