"""One run folder, one run: `<run>/.run.lock` is held for the whole life of the training job.

Two resumes of the same checkpoint would write the same last.ckpt and logs, each undoing the
other's steps. The second is refused at once, naming the holder (pid, host, start time). The
lock is an flock, which the kernel drops with a killed process; a lock still held by a
process that inherited it from a dead owner is broken, as the cache's locks are
(`packlm.runtime.lock_files`: the owner record and its liveness test are the same). Only rank 0 of a
DDP run takes it (the other ranks run in the same folder by design). A fresh run pointed at a
live run's folder is refused earlier, before Hydra writes there
(`packlm.runtime.run_folder.check_not_in_use`, from the `WritableRunDir` Hydra callback).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from packlm.runtime.lock_files import (
    owner_alive,
    owner_record,
    read_owner,
    same_file,
    unlock,
    write_owner,
)
from packlm.runtime.run_folder import LOCK_NAME, RunLocked, in_use_message

log = logging.getLogger(__name__)

_held: set[int] = set()  # fds of the run locks this process holds; closed in forked children


def _close_inherited() -> None:
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)  # a DataLoader worker never keeps its parent's run locked
    _held.clear()


os.register_at_fork(after_in_child=_close_inherited)


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold `<run_dir>/.run.lock` for the block; RunLocked at once when another run holds it."""
    path = Path(run_dir) / LOCK_NAME
    fd = _take(path)
    _held.add(fd)
    try:
        yield
    finally:
        _held.discard(fd)
        unlock(fd)


def _take(path: Path) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = read_owner(path)
            os.close(fd)
            if owner_alive(owner) is not False:
                raise RunLocked(in_use_message(path.parent, owner)) from None
            log.warning(
                "breaking the run lock %s: its owner, process %s, is dead (the lock was kept "
                "by a process that inherited it)",
                path,
                owner.get("pid"),
            )
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            continue  # a new lock file
        if same_file(fd, path):
            break
        os.close(fd)  # broken by another process meanwhile: retry on the new file
    write_owner(fd, owner_record(started=datetime.now().isoformat(timespec="seconds")))
    return fd
