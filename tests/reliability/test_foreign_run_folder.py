"""Issue #59, family 1, second round: `overwrite_run=true` replaces a run packlm trained in
that folder, never another tool's files. Before, a fresh run (with overwrite_run=true where
the folder held checkpoints) deleted whatever matched a run's file names: another project's
`checkpoints/*.ckpt`, its `tb/**/events.out.tfevents.*` and `csv/metrics.csv`, and the whole
`.hydra/` of another Hydra app in a home directory or `hydra.run.dir=.`."""

from __future__ import annotations

import os

import pytest

from packlm.runtime.run_folder import (
    LOCK_NAME,
    RunFolderTaken,
    WritableRunDir,
    check_not_foreign,
    trained_here,
)
from packlm.train import train


def _foreign(folder, *parts):
    """Another tool's files where a packlm run keeps its own."""
    files = {
        "checkpoints": ("checkpoints/model.ckpt", b"another project's weights"),
        "tb": ("tb/version_0/events.out.tfevents.1.host", b"another tool's events"),
        "csv": ("csv/metrics.csv", b"step,loss\n"),
        "hydra": (".hydra/config.yaml", b"app:\n  lr: 0.1\n"),
    }
    for part in parts:
        name, data = files[part]
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "parts", [("checkpoints",), ("tb",), ("csv",), ("hydra",), ("checkpoints", "tb", "hydra")]
)
def test_a_folder_of_another_tool_is_refused_before_anything_is_deleted(tmp_path, parts):
    before = _foreign(tmp_path, *parts)
    assert not trained_here(tmp_path)
    with pytest.raises(RunFolderTaken, match="packlm did not write") as refused:
        check_not_foreign(tmp_path)
    assert "another folder (hydra.run.dir=...)" in str(refused.value)
    assert _files(tmp_path) == before


def test_train_with_overwrite_run_keeps_another_tools_files(compose_tiny, tmp_path):
    """train() from Python (and a sweep's job, which Hydra's run callback does not see)."""
    folder = tmp_path / "home"
    folder.mkdir()
    before = _foreign(folder, "checkpoints", "tb", "csv", "hydra")
    with pytest.raises(RunFolderTaken, match="overwrite_run=true replaces only a packlm run"):
        train(compose_tiny("trainer.max_steps=2", "overwrite_run=true"), run_dir=folder)
    assert _files(folder) == before and not (folder / LOCK_NAME).exists()


def test_the_hydra_callback_refuses_it_before_hydra_writes(tmp_path):
    from omegaconf import OmegaConf

    before = _foreign(tmp_path, "checkpoints", "hydra")
    config = OmegaConf.create(
        {"overwrite_run": True, "ckpt_path": None,
         "hydra": {"run": {"dir": str(tmp_path)}, "output_subdir": ".hydra-pending-1"}}
    )  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        WritableRunDir().on_run_start(config)
    assert stop.value.code == 1 and _files(tmp_path) == before


def test_a_packlm_run_and_an_empty_folder_are_not_foreign(tmp_path):
    check_not_foreign(tmp_path)  # nothing a run would replace
    (tmp_path / "notes.txt").write_text("mine")  # files no run replaces
    check_not_foreign(tmp_path)
    trained = tmp_path / "trained"
    _foreign(trained, "checkpoints", "tb")
    (trained / LOCK_NAME).write_bytes(b"")  # every packlm run held it; emptied when it ended
    assert trained_here(trained)
    check_not_foreign(trained)
    recorded = tmp_path / "recorded"  # a run recorded by Hydra (an older packlm: no lock)
    _foreign(recorded, "checkpoints")
    (recorded / ".hydra").mkdir()
    (recorded / ".hydra" / "config.yaml").write_text(
        "model: {}\ndata: {}\ntokenizer: {}\ntrainer: {}\n"
    )
    check_not_foreign(recorded)
    link = tmp_path / "link"  # a folder that is a link to a run is that run
    os.symlink(trained, link)
    check_not_foreign(link)
