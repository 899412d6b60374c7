"""Processes of a run under test: which of them are still alive."""

from __future__ import annotations

import time
from collections.abc import Iterable

import psutil


def still_running(pids: Iterable[int], seconds: float = 5.0) -> list[int]:
    """The pids still running (zombies count as ended) after waiting up to `seconds`."""
    pids = list(pids)
    deadline = time.monotonic() + seconds
    while (alive := [p for p in pids if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
