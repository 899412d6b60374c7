"""`trainer.precision=auto`: bf16-mixed on a CUDA GPU with bf16, else 32-true (litgpt's rule).

A fixed rule, nothing timed at start-up: on CPUs bf16-mixed was not reliably faster for the
whole step (1.02-1.12x on an AMD EPYC, 0.86x on an Intel Xeon with AMX; bench/presets.md),
so a CPU trains in float32 unless `trainer.precision=bf16-mixed` asks for it.
Kept apart from `trainer_config` because it needs torch, and composing a config must not.
"""

from __future__ import annotations

import torch


def auto_precision(accelerator: str) -> str:
    """bf16-mixed where `accelerator` resolves to a CUDA GPU that supports bf16, else 32-true."""
    cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if cuda and torch.cuda.is_bf16_supported() else "32-true"
