"""A resumed run's CSV log keeps what the run logged up to its checkpoint (as the TensorBoard
purge does): Lightning's CSV writer starts metrics.csv afresh when it opens."""

from __future__ import annotations

import csv
from pathlib import Path

from packlm.train import train


def loss_steps(run: Path) -> list[int]:
    with (run / "csv" / "metrics.csv").open(newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")]


def test_a_resumed_csv_log_keeps_the_rows_before_the_checkpoint(compose_tiny, tmp_path):
    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    train(compose_tiny("logger=many", "trainer.max_steps=4"), run_dir=run)
    assert loss_steps(run) == [0, 1, 2, 3]
    train(compose_tiny("logger=many", "trainer.max_steps=8", f"ckpt_path={last}"))
    assert loss_steps(run) == list(range(8))  # before: [4, 5, 6, 7]
    train(compose_tiny("logger=csv", "trainer.max_steps=8", f"ckpt_path={last}"))  # finished
    assert loss_steps(run) == list(range(8))  # before: no rows at all
    assert not list(run.rglob(".metrics.csv.*"))
