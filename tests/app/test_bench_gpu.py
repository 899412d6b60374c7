"""bench/gpu.py, the GPU benchmark no CPU session can run: its code paths, tiny, on the CPU
(`--dry-run`), so the script a GPU user types has run before; and without CUDA it says so."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def test_dry_run_times_every_contender_and_flex_matches_the_dense_mask():
    result = run("--dry-run", "--repeats", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = dict(re.findall(r"^\|\s*(.+?)\s*\|\s*([-+.e0-9]+)\s*\|$", result.stdout, re.M))
    for measure in (
        "attn fwd+bwd: dense-mask SDPA / Flex (time)",
        "attn fwd+bwd: Flex / is_causal SDPA (time)",
        "BlockMask build alone, ms",
        "training step, eager Flex: tokens/s",
        "training step: eager dense-mask SDPA / eager Flex (time)",
    ):
        assert float(rows[measure]) > 0, measure
    assert float(rows["max |Flex - dense| of the forward"]) < 1e-5  # float32 on the CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the script would run")
def test_without_cuda_it_says_so_and_exits_0():
    result = run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "CUDA" in result.stdout + result.stderr
    assert "|" not in result.stdout  # no table of numbers it did not measure


@pytest.mark.slow
def test_strategies_dry_run_trains_ddp_through_train_py_and_says_fsdp_needs_cuda():
    result = run("--strategies", "--dry-run")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rate, loss = re.search(
        r"ddp\s+([\d,]+) supervised tokens/s\s+val/loss ([\d.]+)", result.stdout
    ).groups()
    assert float(rate.replace(",", "")) > 0 and 0 < float(loss) < 20
    assert "fsdp: needs CUDA" in result.stdout
