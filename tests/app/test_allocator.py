"""train.keep_freed_memory: a repeated training step takes no new pages from the OS."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap

import pytest

from packlm.run import allocator

glibc_only = pytest.mark.skipif(not allocator.is_glibc(), reason="the thresholds are glibc's")

# Ten float32 training steps of packlm's Transformer at nanoGPT's CPU shape (4 x 128, 12 rows
# of 64 tokens, document masks) after two warm-up steps; prints the minor page faults a step.
STEPS = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    from packlm.model.config import ModelConfig
    from packlm.model.transformer import Transformer
    from packlm.run.allocator import keep_freed_memory
    kept = keep_freed_memory() if sys.argv[1] == "keep" else None
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = ModelConfig(vocab_size=65, context_length=64, n_layer=4, n_head=4, n_embd=128)
    model = Transformer(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 65, (12, 64))
    segments = (torch.arange(64) // 16).to(torch.int32).expand(12, 64)
    def step():
        logits = model(x, segments)
        torch.nn.functional.cross_entropy(logits.view(-1, 65), x.view(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    step(); step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(json.dumps({"kept": kept, "faults_per_step": faults / 10}))
    """
)


def _faults_per_step(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", STEPS, mode], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_kept_freed_memory_a_repeated_step_faults_almost_no_new_page():
    kept = _faults_per_step("keep")
    default = _faults_per_step("default")
    assert kept["kept"] is True
    # glibc's defaults give a step's freed memory (its activations, ~6 MB) back to the OS and
    # fault it in again: 1,700-2,800 pages a step here; kept, a few dozen (Python's own).
    assert kept["faults_per_step"] * 8 < default["faults_per_step"], (kept, default)
    assert kept["faults_per_step"] < 256, (kept, default)


def test_not_glibc_sets_nothing_and_says_so(monkeypatch):
    monkeypatch.setattr(platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator.keep_freed_memory.__wrapped__() is False
