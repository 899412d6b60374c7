"""Sweeps through Hydra's launchers (the extra packlm[launchers]): jobs run in other processes
(joblib's workers, submitit's jobs) with the default DataLoader workers, share one cache under
its locks, are named by what the sweep varies, and `packlm.compare` reads them back.

The joblib sweep is docs/training.md's line as written, with the tiny corpus, model and step
budget appended; before packlm chose its loader's start method, every job of it failed in loky's
worker with "'Process' object has no attribute 'env'"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.markdown_commands import documented_command
from helpers.runs import ROOT, tiny_overrides

JOBLIB_LINE = "python train.py -m hydra/launcher=joblib"


def sweep(given: list[str], corpus: Path, tmp_path: Path, *extra: str) -> Path:
    """`given` (a launcher and a `data.stride` sweep) on the tiny run; its sweep directory.
    The tiny run keeps the user's default `data.num_workers`."""
    keys = {a.split("=", 1)[0] for a in given}
    args = tiny_overrides(corpus, tmp_path / "cache", steps=2, val_every=2, lean=True,
                          num_workers=None)  # fmt: skip
    args = [a for a in args if a.split("=", 1)[0] not in keys]
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *given, *args, *extra,
         f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp_path / "sweep"


def check_jobs_and_compare(sweep_dir: Path, strides: list[str]) -> None:
    jobs = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir() and p.name[0].isdigit())
    assert jobs == [f"{i}_data.stride={s}" for i, s in enumerate(strides)]  # the swept key
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
    assert [r.split()[1] for r in rows] == strides  # the data.stride column


def readme_joblib_sweep() -> tuple[list[str], list[str]]:
    """The documented joblib line (arguments after train.py) and the strides it sweeps."""
    pytest.importorskip(
        "hydra_plugins.hydra_joblib_launcher", reason='pip install "packlm[launchers]"'
    )
    given = documented_command(JOBLIB_LINE).argv[2:]
    strides = next(a for a in given if a.startswith("data.stride=")).split("=")[1].split(",")
    return given, strides


def test_the_readme_joblib_sweep_with_the_default_workers(tiny_corpus, tmp_path):
    given, strides = readme_joblib_sweep()
    check_jobs_and_compare(sweep(given, tiny_corpus, tmp_path), strides)


@pytest.mark.slow
def test_the_readme_joblib_sweep_with_two_workers(tiny_corpus, tmp_path):
    given, strides = readme_joblib_sweep()
    sweep_dir = sweep(given, tiny_corpus, tmp_path, "data.num_workers=2")
    check_jobs_and_compare(sweep_dir, strides)


@pytest.mark.slow
def test_a_sweep_through_the_submitit_local_launcher(tiny_corpus, tmp_path):
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher", reason='pip install "packlm[launchers]"'
    )
    given = ["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
             "data.stride=16,32"]  # fmt: skip
    check_jobs_and_compare(sweep(given, tiny_corpus, tmp_path), ["16", "32"])
