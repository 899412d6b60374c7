"""bench/presets.py, the sweep behind the presets: one candidate run end to end comes back as
a row with its val/bpb and steps (it once came back as an error for every run, when the job's
summary line gained what ended it)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "presets.py"


def test_a_candidate_run_comes_back_as_a_row(tmp_path):
    text = tmp_path / "text.txt"  # any prose-like text: the stdlib's own argparse module
    text.write_text(Path(argparse.__file__).read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "3", "--names", "L2d128T64B32v1536",
         "--text", str(text), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
         "tokenizer.vocab_size=300"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert "error" not in row, row.get("error")
    assert row["name"] == "L2d128T64B32v1536" and row["steps"] == 3
    assert 0 < row["val_bpb"] < 16 and row["fit_s"] > 0
