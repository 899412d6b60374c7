"""Processes of a run under test: which of them are still alive."""

from __future__ import annotations

import ast
import subprocess
import sys
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


def run_tool_recording_imports(module: str, argv: list[str], cwd) -> tuple[object, list[str]]:
    """`python -m <module> <argv>` in a fresh interpreter: (the CompletedProcess, which of
    torch and Lightning it had imported when it exited)."""
    script = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('IMPORTED', [m for m in ('torch', 'lightning') "
        "if m in sys.modules], file=sys.stderr))\n"
        f"sys.argv = {[module, *argv]!r}\n"
        f"runpy.run_module({module!r}, run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, cwd=cwd)  # fmt: skip
    line = next((x for x in out.stderr.splitlines() if x.startswith("IMPORTED ")), "IMPORTED None")
    return out, ast.literal_eval(line.removeprefix("IMPORTED "))
