"""`model.compile=auto`: compile the model where it pays on the machine at hand.

Decided at the start of every run (a resume on another machine decides again; the
checkpoint keeps `auto`), by a fixed rule on the machine and the run's length, plus one
probe of the C++ compiler on a CPU where the rule says yes. Whether compiling pays depends
on the machine: the default config's step was 1.15x faster compiled on an Intel Xeon with
AMX, no faster on AMD EPYCs with AVX2 or AVX-512 (issue 61; docs/speed.md, "model.compile=auto"),
and the compile itself takes ~25 s on two CPU cores. Kept apart from `ModelConfig` because it
needs torch, and composing a config must not (as `packlm.config.precision`).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import torch

from packlm.errors import bounded

CPU_KINDS_THAT_PAY = frozenset({"AVX512+AMX"})
"""`cpu_kind()` values where compiled CPU steps were measured faster than eager ones: an
Intel Xeon with AMX, the default config 1.15x in float32 and 1.55x in bf16-mixed once
compiled (docs/speed.md). Measured no faster: AMD EPYCs with AVX2 (0.9x, issue 61) and with
AVX-512 (0.97-1.0x steady, 2026-12-07); so `python train.py` on those stays eager."""
MIN_STEPS = 2000
"""Optimizer steps a CPU run must plan for its compiled steps to repay the compile: at the
default config's ~0.26 s a step and 1.15x, the ~25 s compile is repaid after ~750 steps;
2000 leaves room for a slower machine and a bigger model's longer compile."""
MIN_MINUTES = 10.0
"""With no step limit, the minutes of trainer.max_time a CPU run must have for the same
(2000 of those steps take ~9 min)."""
CPUINFO = Path("/proc/cpuinfo")
"""Where Linux lists the CPU's flags (AMX: `amx_tile`); elsewhere no AMX is assumed."""
COMPILE_SECONDS = 25
"""About how long the first compiled steps of the default config take on two CPU cores
(issue 61: 25 s of 117 s); only quoted in the reason a short run gives."""


def auto_compile(
    accelerator: str,
    steps: int | None,
    minutes: float | None,
    detect_anomaly: bool = False,
) -> tuple[bool, str]:
    """(compile?, why) for a run on `accelerator` (trainer.accelerator) that plans `steps`
    optimizer steps (None: no step limit) in at most `minutes` (trainer.max_time; None: none).

    CUDA: on. trainer.detect_anomaly: off (a compiled graph names fused kernels, not the
    operation that made the NaN). Another accelerator (MPS, ...): off. A CPU: on only when
    its kind (cpu_kind) is in CPU_KINDS_THAT_PAY, the run is long (MIN_STEPS, MIN_MINUTES) and
    a tiny function compiles and runs (the C++ compiler works), probed in that order so a
    short run or a slow instruction set pays no probe.
    """
    if detect_anomaly:
        return False, "trainer.detect_anomaly: eager steps name the operation that failed"
    device = _device(accelerator)
    if device == "cuda":
        return True, "CUDA"
    if device != "cpu":
        return False, f"{device}: compiled steps not measured there"
    isa = cpu_kind()
    if isa not in CPU_KINDS_THAT_PAY:
        return False, f"CPU {isa}: compiled steps not measured faster on it, see docs/training.md"
    length = _run_length(steps, minutes)
    if _too_short(steps, minutes):
        return False, f"{length}: too short to repay the ~{COMPILE_SECONDS} s compile"
    works, detail = compiler_works()
    if not works:
        return False, f"CPU {isa}, {length}, but no working C++ compiler: {detail}"
    return True, f"CPU {isa}, {length}, C++ compiler works ({detail})"


def _device(accelerator: str) -> str:
    """cuda, cpu or the other accelerator the run will use (Lightning's `auto` order)."""
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "cuda"
    if accelerator in ("auto", "mps", "gpu") and torch.backends.mps.is_available():
        return "mps"
    return "cpu" if accelerator in ("auto", "cpu") else str(accelerator)


def cpu_kind() -> str:
    """The instruction set torch's CPU kernels use here (AVX512, AVX2, DEFAULT, SVE256, ...),
    `AVX512+AMX` where the CPU also has AMX tiles (torch reports AVX512 for both)."""
    isa = torch.backends.cpu.get_cpu_capability()
    return f"{isa}+AMX" if isa == "AVX512" and "amx_tile" in _cpu_flags() else isa


def _cpu_flags() -> set[str]:
    """The CPU's flags from CPUINFO (empty where it is missing or unreadable)."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags")
            for flag in line.partition(":")[2].split()}  # fmt: skip


def _too_short(steps: int | None, minutes: float | None) -> bool:
    if steps is not None and steps < MIN_STEPS:
        return True
    return minutes is not None and minutes < MIN_MINUTES


def _run_length(steps: int | None, minutes: float | None) -> str:
    """The run's planned length in the reason's words: '5000 steps', '0.5 min', 'no limit'."""
    parts = [f"{steps} step{'' if steps == 1 else 's'}"] if steps is not None else []
    if minutes is not None:
        parts.append(f"{minutes:g} min")
    return " in ".join(parts) or "no step or time limit"


@functools.cache
def compiler_works() -> tuple[bool, str]:
    """(whether inductor compiles and runs a tiny function here, what it cost or the first
    line of its error). Once per process: 5-25 s on two cores, most of it loading inductor
    and its first C++ build, which the model's own compile would pay next anyway."""
    start = time.perf_counter()
    x = torch.arange(8, dtype=torch.float32)
    try:
        got = torch.compile(_probe)(x)
    except Exception as e:  # inductor's errors live in private modules; any failure says no
        return False, first_line(e)
    if not torch.equal(got, _probe(x)):
        return False, "the compiled probe computed another result"
    return True, f"{time.perf_counter() - start:.1f} s probe"


def _probe(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2.0 - 3.0)  # [8]: one fused C++ kernel


def first_line(e: BaseException) -> str:
    """`Type: first line of the message`, at most 200 characters (inductor's errors run to
    pages)."""
    lines = str(e).strip().splitlines()
    return bounded(f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__, 200)
