"""Cache locks: a forked worker never holds its parent's lock, the lock records its owner, and
a lock whose owner is dead is broken with a log line (issue 14)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from packlm.cache import lock as entry


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def wait_closed(pid: int, path: Path, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while str(path) in _open_files(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _open_files(pid: int) -> list[str]:
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            out.append(os.readlink(fd))
    return out


# --- locks ------------------------------------------------------------------------------------


def test_a_forked_worker_never_holds_the_lock_of_its_parent(tmp_path):
    dest = tmp_path / "entry"
    ctx = multiprocessing.get_context("fork")
    with entry.locked(dest):
        worker = ctx.Process(target=time.sleep, args=(30,), daemon=True)
        worker.start()
        lock = tmp_path / ".entry.lock"
        assert wait_closed(worker.pid, lock)  # the child closes it first thing after the fork
        owner = json.loads(lock.read_text())
        assert owner["pid"] == os.getpid() and owner["start"] == entry.process_start(os.getpid())
    try:
        with open(lock, "a") as f:  # the parent released it: free although the child lives
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
        assert worker.is_alive()
    finally:
        worker.kill()
        worker.join()


HOLDER = """
import fcntl, json, os, socket, sys, time
lock, owner = sys.argv[1], int(sys.argv[2]) or os.getpid()
fd = os.open(lock, os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, json.dumps({"pid": owner, "start": None, "host": socket.gethostname()}).encode())
print("held", flush=True)
time.sleep(float(sys.argv[3]))
open(lock + ".done", "w").close()  # written while the lock is still held
"""


def hold(lock: Path, owner: int, seconds: float) -> subprocess.Popen:
    """A process holding the flock of `lock`, its record naming `owner` as the owner."""
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), str(lock), str(owner), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline() == "held\n"
    return p


def test_a_lock_kept_by_a_process_whose_owner_is_dead_is_broken_with_a_log_line(tmp_path, caplog):
    """As the orphaned workers of an older version did: the lock is held, its owner is dead."""
    dest = tmp_path / "entry"
    pid = dead_pid()
    orphan = hold(tmp_path / ".entry.lock", pid, 60)
    try:
        with caplog.at_level(logging.INFO, logger="packlm"), entry.locked(dest):
            assert orphan.poll() is None  # taken while the orphan still holds it: broken
        assert any(
            f"breaking the lock {tmp_path / '.entry.lock'}: its owner, process {pid}, is dead"
            in r.getMessage()
            for r in caplog.records
        )
    finally:
        orphan.kill()
        orphan.wait()


def test_a_live_owner_is_waited_for_and_named(tmp_path, caplog):
    holder = hold(tmp_path / ".entry.lock", 0, 1.0)  # 0: its record names itself
    holder_owner = holder.pid
    with caplog.at_level(logging.INFO, logger="packlm"), entry.locked(tmp_path / "entry"):
        taken_after_release = (tmp_path / ".entry.lock.done").exists()
    holder.wait()
    assert taken_after_release  # the holder had finished: the lock was waited for, not broken
    assert any(
        f"waiting for another process (pid {holder_owner})" in r.getMessage()
        for r in caplog.records
    )
    assert not any("breaking" in r.getMessage() for r in caplog.records)


def test_an_owner_exiting_between_the_lock_and_the_liveness_check_is_not_broken(
    tmp_path, caplog, monkeypatch
):
    """The owner exits (and its lock with it) right after a waiter's try of the lock failed:
    the waiter sees a dead owner, but the lock is free, so it takes it instead of breaking it."""
    holder = hold(tmp_path / ".entry.lock", 0, 60)
    alive = entry.owner_alive

    def owner_exits_first(owner):
        holder.kill()
        holder.wait()
        return alive(owner)

    monkeypatch.setattr(entry, "owner_alive", owner_exits_first)
    with caplog.at_level(logging.INFO, logger="packlm"), entry.locked(tmp_path / "entry"):
        assert (tmp_path / ".entry.lock").exists()
    assert holder.returncode is not None
    assert not any("breaking" in r.getMessage() for r in caplog.records)


def test_owner_liveness_sees_zombies_and_reused_pids():
    host = os.uname().nodename
    me = os.getpid()
    assert entry.owner_alive({"pid": me, "start": entry.process_start(me), "host": host})
    assert entry.owner_alive({"pid": me, "start": "1", "host": host}) is False  # pid reused
    assert entry.owner_alive({"pid": dead_pid(), "host": host}) is False
    zombie = subprocess.Popen(["true"])
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
    assert entry.owner_alive({"pid": zombie.pid, "host": host}) is False
    zombie.wait()
    assert entry.owner_alive({"pid": me, "host": "elsewhere"}) is None
