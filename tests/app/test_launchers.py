"""Sweeps through Hydra's launchers (the extra packlm[launchers]): jobs run in other processes
(joblib's workers, submitit's jobs), share one cache under its locks, are named by what the
sweep varies, and `packlm.compare` reads them back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.runs import ROOT, tiny_overrides


def sweep(launcher: list[str], corpus: Path, tmp_path: Path) -> Path:
    """A two-job stride sweep through `launcher`; its sweep directory."""
    args = tiny_overrides(corpus, tmp_path / "cache", steps=2, val_every=2, lean=True)
    args = [a for a in args if not a.startswith("data.stride=")]
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", *launcher, *args, "data.stride=16,32",
         f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp_path / "sweep"


def check_jobs_and_compare(sweep_dir: Path) -> None:
    jobs = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir() and p.name[0].isdigit())
    assert jobs == ["0_data.stride=16", "1_data.stride=32"]  # named by the swept key alone
    for job in jobs:
        assert (sweep_dir / job / "checkpoints" / "last.ckpt").is_file()
    stores = list((sweep_dir.parent / "cache" / "stores").iterdir())
    assert len([s for s in stores if not s.name.startswith(".")]) == 1  # one shared store
    table = subprocess.run(
        [sys.executable, "-m", "packlm.compare", str(sweep_dir)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    rows = [line for line in table.stdout.splitlines() if line.startswith(("0_", "1_"))]
    assert [r.split()[1] for r in rows] == ["16", "32"]  # the data.stride column


def test_a_sweep_through_the_joblib_launcher(tiny_corpus, tmp_path):
    pytest.importorskip(
        "hydra_plugins.hydra_joblib_launcher", reason='pip install "packlm[launchers]"'
    )
    launcher = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    check_jobs_and_compare(sweep(launcher, tiny_corpus, tmp_path))


@pytest.mark.slow
def test_a_sweep_through_the_submitit_local_launcher(tiny_corpus, tmp_path):
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher", reason='pip install "packlm[launchers]"'
    )
    launcher = ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]
    check_jobs_and_compare(sweep(launcher, tiny_corpus, tmp_path))
