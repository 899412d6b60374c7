"""train.keep_freed_memory (off by default: it changes the whole process): a repeated step's
freed blocks take no new pages from the OS; glibc's environment variables do the same from
the shell."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from packlm.config.schema import TrainConfig
from packlm.train import allocator

glibc_only = pytest.mark.skipif(not allocator.is_glibc(), reason="the thresholds are glibc's")

# glibc's documented rules, made to bite: a freed 1 MiB block raises the mmap threshold to 1 MiB
# (the trim threshold to 2 MiB), so 16 blocks of 512 KiB come from the heap, and once freed
# the heap's top (8 MiB) goes back to the OS, to be faulted in again by the next step.
BLOCKS = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    from packlm.train.allocator import keep_freed_memory
    kept = keep_freed_memory() if sys.argv[1] == "keep" else None
    big = np.ones(1 << 20, dtype=np.uint8)
    del big
    def step():
        blocks = [np.ones(512 << 10, dtype=np.uint8) for _ in range(16)]
        del blocks
    step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(json.dumps({"kept": kept, "faults_per_step": faults / 10}))
    """
)


def _faults_per_step(script: str, mode: str, env: dict | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", script, mode],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_kept_freed_memory_is_not_given_back_and_faulted_in_again():
    kept = _faults_per_step(BLOCKS, "keep")
    default = _faults_per_step(BLOCKS, "default")
    assert kept["kept"] is True
    assert default["faults_per_step"] >= 1024, default  # >= half the 8 MiB each step
    assert kept["faults_per_step"] < 16, kept


@glibc_only
def test_glibc_environment_variables_keep_freed_memory_as_the_key_does():
    """The shell's way, which allocator.py's docstring and the key's description give."""
    env = {
        "MALLOC_MMAP_THRESHOLD_": str(allocator.MMAP_THRESHOLD),
        "MALLOC_TRIM_THRESHOLD_": str(allocator.TRIM_THRESHOLD),
    }
    assert env == {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"}
    from_env = _faults_per_step(BLOCKS, "default", env)
    assert from_env["kept"] is None  # mallopt not called
    assert from_env["faults_per_step"] < 16, from_env


def test_keep_freed_memory_is_off_unless_asked():
    """mallopt is process-wide (a notebook's, a test run's allocations too): opt-in only."""
    assert TrainConfig().keep_freed_memory is False


def test_not_glibc_sets_nothing_and_says_so(monkeypatch):
    monkeypatch.setattr(platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator.keep_freed_memory.__wrapped__() is False
