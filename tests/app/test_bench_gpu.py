"""bench/gpu.py, the GPU benchmark no CPU session can measure: without CUDA it says so and runs
the same code paths (every attention path, compile on and off) at a tiny size on the CPU, so
the command a GPU user types has run before."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu.py"
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: it would measure")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=1200
    )


def table(stdout: str) -> list[dict[str, str]]:
    """The rows of the results table, by column name."""
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True))
            for line in lines[1:]]  # fmt: skip
    return [row for row in rows if row["T"].isdigit()]


@no_gpu
@pytest.mark.slow
def test_without_a_gpu_every_path_runs_tiny_and_says_no_gpu_was_found():
    result = run("--repeats", "1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "No CUDA GPU found" in result.stdout
    rows = table(result.stdout)
    runs = {(r["T"], r["attention"], r["optim"], r["compile"]) for r in rows}
    assert len({r["T"] for r in rows}) == 2  # two row lengths, as 1024 and 2048 on a GPU
    kinds = (("sdpa", "adamw"), ("flex", "adamw"), ("flex", "muon"))
    assert runs == {(T, a, o, c) for T in {r["T"] for r in rows} for a, o in kinds
                    for c in ("off", "on")}  # fmt: skip
    for row in rows:
        if (row["attention"], row["compile"]) == ("flex", "on") and "failed" in row["tokens/s"]:
            continue  # inductor may lack a CPU FlexAttention kernel (torch 2.13): said, not hidden
        assert float(row["tokens/s"].replace(",", "")) > 0, row
        assert int(row["docs/row"]) >= 2 and 0 < float(row["useful attn"]) < 1, row
        assert row["MFU"] == "n/a" and row["peak MiB"] == "n/a", row  # no GPU peak or memory
    assert sum("failed" not in row["tokens/s"] for row in rows) >= 8  # all but compiled flex
    diffs = re.findall(r"max abs\(flex - sdpa\) logits, float32: ([-+.e0-9]+)", result.stdout)
    assert len(diffs) == 2 and all(float(d) < 1e-4 for d in diffs)


def test_mfu_counts_nanogpt_flops_per_token():
    """6 N + 12 L C T: N the parameters in matmuls (a tied embedding is the head's)."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from packlm.config.model import ModelConfig

    cfg = ModelConfig(**gpu.GPT2_124M, context_length=1024)
    model = gpu.meta_model(cfg)
    n = model.num_parameters()
    assert 120e6 < n < 130e6  # GPT-2 small's size
    assert gpu.flops_per_token(model, 1024) == 6 * n + 12 * 12 * 768 * 1024
    untied = gpu.meta_model(ModelConfig(**dict(gpu.GPT2_124M, tie_embeddings=False)))
    assert gpu.flops_per_token(untied, 1024) == 6 * n + 12 * 12 * 768 * 1024  # wte: no matmul
    assert gpu.peak_flops(torch.device("cpu"), None) is None
    assert gpu.peak_flops(torch.device("cpu"), 100.0) == 100e12


@no_gpu
@pytest.mark.slow
def test_strategies_dry_run_trains_ddp_through_train_py_and_says_fsdp_needs_cuda():
    result = run("--strategies")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rate, loss = re.search(
        r"ddp\s+([\d,]+) supervised tokens/s\s+val/loss ([\d.]+)", result.stdout
    ).groups()
    assert float(rate.replace(",", "")) > 0 and 0 < float(loss) < 20
    assert "fsdp: needs CUDA" in result.stdout


def test_the_muon_rows_step_muon_on_the_hidden_matrices_as_training_does():
    """optim=muon's row: MuonAdamW over LitCausalLM's groups (hidden matrices Muon's, the
    embedding, head and vectors AdamW's), and a step moves every trained weight."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from packlm.config.model import ModelConfig
    from packlm.model.muon import MuonAdamW

    T = 32
    batches = gpu.packed_batches(2, T, gpu.TINY["vocab_size"], 1, torch.device("cpu"))
    step = gpu.TrainStep(ModelConfig(**gpu.TINY, context_length=T), batches, False, False, "muon")
    assert isinstance(step.opt, MuonAdamW)
    muon = [p for g in step.opt.param_groups if g["muon"] for p in g["params"]]
    hidden = [p for n, p in step.model.named_parameters() if p.dim() == 2 and "wte" not in n
              and "lm_head" not in n]  # fmt: skip
    assert {id(p) for p in muon} == {id(p) for p in hidden} and hidden
    before = [p.detach().clone() for p in step.model.parameters()]
    step()
    moved = [not torch.equal(a, p) for a, p in zip(before, step.model.parameters(), strict=True)]
    assert all(moved)
