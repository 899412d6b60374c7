"""Worker processes, as both the tokenizer's counting and the store's encoding run them.

1. `start_context`: fork where it is safe (milliseconds a worker), spawn elsewhere.
2. `die_with_parent`: called first in a worker, so no worker outlives its parent, even a
   parent killed by SIGKILL.
3. `exited` and `death_message`: a parent that waits on a queue checks its workers, and a
   dead one becomes `WorkerDied` naming the phase and the signal, never a hang.
4. `leave_ctrl_c_to_the_parent`: a terminal's Ctrl-C reaches every process of its group; the
   parent stops them all, so a worker ignores it (the DataLoader's workers too).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import wait

PR_SET_PDEATHSIG = 1


def leave_ctrl_c_to_the_parent(worker_id: int | None = None) -> None:
    """Ignore SIGINT here: the parent's handler (inherited by a forked worker) would report
    the Ctrl-C once per worker, and the parent ends its workers itself. A DataLoader's
    `worker_init_fn` (hence the unused `worker_id`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def die_with_parent(parent: int) -> None:
    """In a worker: be killed as soon as `parent` is gone, even by SIGKILL.

    Linux: the kernel sends SIGKILL when the parent exits (prctl PR_SET_PDEATHSIG); elsewhere
    a daemon thread polls the parent id. Either way a parent already gone means exit now.
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: poll
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # died before prctl took effect
        os._exit(1)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def death_message(phase: str, pid: int | None, exitcode: int | None) -> str:
    """'pre-tokenizing …: worker process 123 was killed by SIGKILL' (or 'exited with status 3')."""
    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited with status {exitcode}"
    hint = " (out of memory? try fewer workers)" if exitcode == -signal.SIGKILL else ""
    return f"{phase}: worker process {pid} {how}{hint}"


class WorkerDied(ChildProcessError):
    """A worker process ended before its work was done (an OSError: CLIs print it as one line)."""


def start_context():
    """fork starts a worker in milliseconds; spawn where fork is unsafe or absent."""
    use_fork = (
        sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
    )
    return multiprocessing.get_context("fork" if use_fork else "spawn")


def exited(p) -> bool:
    """The worker has exited; its sentinel says so even if another handler reaped it
    (then `exitcode` stays None forever and waiting on it would spin)."""
    return p.exitcode is not None or bool(wait([p.sentinel], timeout=0))
