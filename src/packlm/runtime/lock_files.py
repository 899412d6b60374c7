"""Lock files that say who holds them: an flock plus an owner record, and its liveness test.

The kernel drops an flock with a killed process, but a forked child holds its parent's
flock too, so a lock can outlive its owner. Each lock file therefore records its owner
(pid, process start time, host); `owner_alive` tells a dead owner from a live one, so a
waiter can break a lock whose owner is gone. The cache's entry locks (`packlm.cache.lock`)
and the run folder's lock (`packlm.train.run_lock`) share these rules.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from pathlib import Path


def process_start(pid: int) -> str | None:
    """The start time of `pid` (clock ticks since boot, from /proc), None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int) -> bool:
    """Is process `pid` of this host alive (a pid we may not signal is someone's: alive)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(owner: dict) -> bool | None:
    """Is the process recorded in a lock file alive? None when it cannot be told (another host)."""
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return None
    pid = owner["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    state, start = stat.rsplit(")", 1)[1].split()[0], process_start(pid)
    if state in ("Z", "X"):  # killed, not yet reaped by its parent
        return False
    return owner.get("start") in (None, start)  # another start time: the pid was reused


def read_owner(path: Path) -> dict:
    """The owner record of a lock file ({} when absent or unreadable)."""
    try:
        owner = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def owner_record(**extra) -> dict:
    """This process's owner record (pid, start time, host, and any `extra` facts)."""
    pid = os.getpid()
    return {"pid": pid, "start": process_start(pid), "host": socket.gethostname(), **extra}


def write_owner(fd: int, record: dict) -> None:
    """Replace the lock file's owner record (the lock is held on `fd`)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)


def same_file(fd: int, path: Path) -> bool:
    """Is `fd` still the file at `path` (not broken and replaced by another process)?"""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def unlock(fd: int) -> None:
    """Release a lock taken by this process: its owner record cleared, the flock dropped."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
