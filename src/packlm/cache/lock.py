"""One process at a time builds a cache entry: the entry's exclusive lock.

Builders write into a hidden temporary sibling and rename it into place; an exclusive
lock per entry keeps two runs of a sweep from building the same entry twice (the second
waits, then finds it built). The kernel drops the lock of a killed process, and the next
holder removes what the killed build left behind.

An flock is shared by every process that holds the open file, and a forked worker holds
it too: a worker orphaned by a killed parent would keep the lock for ever. So a forked
child closes every lock its parent holds at once (`os.register_at_fork`), and the lock
file records its owner (pid, process start time, host): a waiter that finds the lock held
although its owner is dead (a worker of an older version, say) breaks it, with a log line.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from packlm.errors import write_error
from packlm.runtime.lock_files import (
    owner_alive,
    owner_record,
    process_start,
    read_owner,
    same_file,
    unlock,
    write_owner,
)

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
"""How often a waiter retries the lock and checks that its owner is alive."""
_held: set[int] = set()  # fds of the locks this process holds; closed in forked children


def _close_inherited_locks() -> None:
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)  # the parent's lock stays the parent's; the child never holds it
    _held.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def _acquire(lock_path: Path, dest: Path) -> int:
    """An fd holding the exclusive lock of `lock_path`, the owner record written into it."""
    announced = False
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if _wait_for(fd, lock_path, dest, announced) and same_file(fd, lock_path):
            break
        announced = True
        os.close(fd)  # the lock file was broken or replaced: retry on the new one
    try:
        write_owner(fd, owner_record())
    except OSError as e:  # the record is what lets a later run break a dead owner's lock
        os.close(fd)
        raise write_error(e, f"the lock file {lock_path}", "set cache_dir elsewhere") from None
    return fd


def _wait_for(fd: int, lock_path: Path, dest: Path, announced: bool) -> bool:
    """Take the flock of `fd`: True once held, False when its file stopped being the lock file."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        owner = read_owner(lock_path)
        if owner_alive(owner) is False and same_file(fd, lock_path):
            try:  # an owner that just exited released the lock with it: take it, break nothing
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass  # still held, by a process that inherited it from its dead owner
            log.warning(
                "breaking the lock %s: its owner, process %s, is dead (the lock was kept by "
                "a process that inherited it)",
                lock_path,
                owner.get("pid"),
            )
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock_path)
        if not same_file(fd, lock_path):
            return False
        if not announced:
            log.info(
                "waiting for another process (pid %s) building %s", owner.get("pid", "?"), dest
            )
            announced = True
        time.sleep(POLL_SECONDS)


@contextlib.contextmanager
def locked(dest: Path) -> Iterator[None]:
    """Hold the entry's lock (`.<name>.lock` next to it); clean up leftovers of killed builds."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(dest.parent / f".{dest.name}.lock", dest)
    _held.add(fd)
    try:
        for pattern in (f".{dest.name}.tmp-*", f".{dest.name}.old-*"):
            for leftover in dest.parent.glob(pattern):
                log.info("removing %s, left by an interrupted build", leftover)
                shutil.rmtree(leftover, ignore_errors=True)
        yield
    finally:
        _held.discard(fd)
        unlock(fd)


__all__ = ["locked", "owner_alive", "process_start", "unlock"]
