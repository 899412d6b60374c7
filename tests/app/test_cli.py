"""The commands a user types: a sweep, a bad override, text generation (subprocesses)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_bad_override_fails_at_once_naming_the_key(tmp_path):
    result = run(["data.window=0", f"cache_dir={tmp_path}/cache"], tmp_path)
    assert result.returncode != 0
    assert "data.window" in result.stderr
    assert not (tmp_path / "cache").exists(), "work started before the config was validated"


def test_two_by_two_sweep_gives_four_runs_with_hparams(tiny_args, tmp_path):
    sweep = tmp_path / "sweep"
    overrides = [o for o in tiny_args if not o.startswith(("data.window", "data.stride"))]
    result = run(
        ["-m", "data.window=16,32", "data.stride=8,16", *overrides,
         "trainer.max_steps=2", "trainer.val_check_interval=2", "train.sample_prompt=", f"hydra.sweep.dir={sweep}"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    runs = sorted(p.parent for p in sweep.glob("*/tb"))
    assert len(runs) == 4, [str(r) for r in runs]
    combos = set()
    for run_dir in runs:
        acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"tensors": 0})
        acc.Reload()
        assert "val/loss" in acc.Tags()["scalars"], run_dir
        plugins = acc.PluginTagToContent("hparams")
        assert "_hparams_/experiment" in plugins and "_hparams_/session_start_info" in plugins
        combos.add(run_dir.name)
    names = {c.split("_", 1)[1] for c in combos}  # named by what the sweep varies, nothing else
    assert names == {f"data.window={w},data.stride={s}" for w in (16, 32) for s in (8, 16)}
    # the sweep's last lines: its folder and the command that compares its jobs
    assert result.stdout.rstrip().splitlines()[-3:] == [
        f"sweep: 4 jobs in {sweep}",
        f"compare them: python -m packlm.compare {sweep}",
        f"TensorBoard: tensorboard --logdir {sweep}",
    ]


def test_sweep_lines_quote_a_folder_a_shell_would_split(tmp_path):
    from packlm.runtime.sweep_end import sweep_lines

    sweep = tmp_path / "my sweep"
    for job in ("0_data.stride=8", "1_data.stride=16", ".submitit"):
        (sweep / job).mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("{}")
    lines = sweep_lines(sweep).splitlines()
    assert lines[0] == f"sweep: 2 jobs in {sweep}"  # not the hidden folder, not the file
    assert lines[1] == f"compare them: python -m packlm.compare '{sweep}'"
    assert sweep_lines(tmp_path / "absent").startswith("sweep: 0 jobs in ")
