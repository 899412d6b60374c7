"""`trainer.precision=auto`: bf16-mixed where this machine multiplies bf16 faster, else 32-true.

On a CPU the choice is measured (`cpu_bf16_matmul_gain`), once per run: the first process
leaves the figure in the environment that its DDP ranks inherit, so every rank picks the same.
Kept apart from `trainer_config` because it needs torch, and composing a config must not.
"""

from __future__ import annotations

import functools
import math
import os
import time

import torch

from packlm.shims import mkldnn_bf16_supported

BF16_MATMUL_GAIN = 1.5
"""On a CPU, bf16-mixed needs its bf16 matmul at least this much faster than float32's:
autocast adds casts, and attention and the norms stay float32 (sessions 4-8's CPU: 2.2x, the
step 0.79x the time; session 10's AMD EPYC: 3.7-4.0x, the step 0.55-0.61x)."""


def auto_precision(accelerator: str) -> str:
    """bf16-mixed where the chip multiplies bf16 natively and faster, else 32-true (litgpt's
    rule, for CPUs too): a CUDA GPU with bf16, or a CPU whose bf16 matmul is measured at least
    `BF16_MATMUL_GAIN` times faster than float32 (`cpu_bf16_matmul_gain`)."""
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    if accelerator in ("auto", "cpu") and cpu_bf16_matmul_gain() >= BF16_MATMUL_GAIN:
        return "bf16-mixed"
    return "32-true"


GAIN_ENV = "PACKLM_CPU_BF16_GAIN"
"""Where the measured gain is kept for the processes a run starts (DDP ranks): one choice."""


@functools.cache
def cpu_bf16_matmul_gain() -> float:
    """float32 time / bf16 time of a [1024, 256] @ [256, 1024] matmul here (best of 5 each,
    interleaved; about 25 ms; 0 where oneDNN has no bf16). Measured because the CPU's flags do
    not tell: AVX512-BF16 without AMX ran bf16 at 0.5x float32 on one Intel CPU (session 9)
    and at 3.9x on an AMD EPYC one (session 10); with AMX, 2.2x. The first process measures
    and leaves the figure in $PACKLM_CPU_BF16_GAIN, so the ranks Lightning starts later read
    it instead of measuring each on its own (they would race for the same cores)."""
    if GAIN_ENV in os.environ:
        return float(os.environ[GAIN_ENV])
    gain = 0.0
    if torch.backends.mkldnn.is_available() and mkldnn_bf16_supported():
        generator = torch.Generator().manual_seed(0)  # not the global RNG: seeding comes later
        a = torch.randn(1024, 256, generator=generator)
        b = torch.randn(256, 1024, generator=generator)
        operands = [(a, b), (a.bfloat16(), b.bfloat16())]
        best = [math.inf, math.inf]
        for _ in range(5):
            for i, (x, y) in enumerate(operands):
                start = time.perf_counter()
                x @ y
                best[i] = min(best[i], time.perf_counter() - start)
        gain = best[0] / best[1]
    os.environ[GAIN_ENV] = repr(gain)
    return gain
