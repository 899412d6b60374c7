"""A cache entry is a directory that appears whole or not at all, built by one process at a time.

Builders write into a hidden temporary sibling and rename it into place; an exclusive
lock per entry keeps two runs of a sweep from building the same entry twice (the second
waits, then finds it built). The kernel drops the lock of a killed process, and the next
holder removes what the killed build left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)


@contextlib.contextmanager
def locked(dest: Path) -> Iterator[None]:
    """Hold the entry's lock (`.<name>.lock` next to it); clean up leftovers of killed builds."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process building %s", dest)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for pattern in (f".{dest.name}.tmp-*", f".{dest.name}.old-*"):
                for leftover in dest.parent.glob(pattern):
                    log.info("removing %s, left by an interrupted build", leftover)
                    shutil.rmtree(leftover, ignore_errors=True)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def temporary_sibling(dest: Path) -> Path:
    """A fresh hidden directory name next to `dest`, on the same filesystem (rename is atomic)."""
    return dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def replace_dir(tmp: Path, dest: Path) -> None:
    """Rename `tmp` to `dest`; an existing `dest` (stale or damaged) is moved aside, then removed."""
    if dest.exists():
        old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, dest)
