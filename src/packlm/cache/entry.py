"""A cache entry is a directory that appears whole or not at all, built by one process at a time.

Builders write into a hidden temporary sibling and rename it into place; an exclusive
lock per entry keeps two runs of a sweep from building the same entry twice (the second
waits, then finds it built). The kernel drops the lock of a killed process, and the next
holder removes what the killed build left behind.

An flock is shared by every process that holds the open file, and a forked worker holds
it too: a worker orphaned by a killed parent would keep the lock for ever. So a forked
child closes every lock its parent holds at once (`os.register_at_fork`), and the lock
file records its owner (pid, process start time, host): a waiter that finds the lock held
although its owner is dead (a worker of an older version, say) breaks it, with a log line.

A run holds the entries it opened (`hold`) for the rest of its life: a record per process
(pid, start time, host, command line) in `.<name>.in-use/` beside the entry, which
`python -m packlm.cache` reads (`holders`) to refuse removing an entry a live run reads
(before, the run died at its next validation). A record is judged by its owner's liveness,
never by a lock a forked worker could inherit, so a killed run's record is simply stale.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from errno import EBUSY, ENOENT
from pathlib import Path

from packlm.errors import write_error

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
"""How often a waiter retries the lock and checks that its owner is alive."""
_held: set[int] = set()  # fds of the locks this process holds; closed in forked children


def _close_inherited_locks() -> None:
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)  # the parent's lock stays the parent's; the child never holds it
    _held.clear()
    _holds.clear()  # the parent's in-use records stay the parent's: the child never removes them


os.register_at_fork(after_in_child=_close_inherited_locks)


def process_start(pid: int) -> str | None:
    """The start time of `pid` (clock ticks since boot, from /proc), None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


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


def _read_owner(path: Path) -> dict:
    try:
        owner = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _acquire(lock_path: Path, dest: Path) -> int:
    """An fd holding the exclusive lock of `lock_path`, the owner record written into it."""
    announced = False
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if _wait_for(fd, lock_path, dest, announced) and _same_file(fd, lock_path):
            break
        announced = True
        os.close(fd)  # the lock file was broken or replaced: retry on the new one
    record = {"pid": os.getpid(), "start": process_start(os.getpid()), "host": socket.gethostname()}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
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
        owner = _read_owner(lock_path)
        if owner_alive(owner) is False and _same_file(fd, lock_path):
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
        if not _same_file(fd, lock_path):
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


def unlock(fd: int) -> None:
    """Release a lock taken by this process: its owner record cleared, the flock dropped."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def mark_used(entry: Path) -> None:
    """Set the entry's modification time to now on a cache hit: `python -m packlm.cache`
    lists and prunes by it. A read-only shared cache stays as it is."""
    with contextlib.suppress(OSError):
        os.utime(entry)


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


# --- entries in use ---------------------------------------------------------------------------


class EntryInUse(OSError):
    """An entry a live run holds (errno EBUSY); the message names the run."""


@dataclass
class Hold:
    """This process's record that it reads the entry at `path` (see `hold`)."""

    path: Path
    record: Path

    def release(self) -> None:
        if _holds.get(self.path) is self:
            del _holds[self.path]
        with contextlib.suppress(OSError):
            self.record.unlink()
            self.record.parent.rmdir()  # only when no other run holds the entry

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_holds: dict[Path, Hold] = {}  # this process's holds, released when it exits


def in_use_dir(entry: Path) -> Path:
    return entry.parent / f".{entry.name}.in-use"


def hold(entry: str | os.PathLike) -> Hold | None:
    """Record this process as a reader of `entry`, which it has just opened, until it exits
    (or `release`): `python -m packlm.cache` then refuses to remove it. None where the record
    cannot be written (a read-only shared cache). A FileNotFoundError naming the entry when a
    remove took it meanwhile: a loud error at once, not a run that dies at its next validation."""
    entry = Path(entry).resolve()
    if entry in _holds:
        return _holds[entry]
    record = in_use_dir(entry) / f"{socket.gethostname()}-{os.getpid()}.json"
    owner = {
        "pid": os.getpid(),
        "start": process_start(os.getpid()),
        "host": socket.gethostname(),
        "command": _command_line(),
    }
    try:
        for _ in range(3):  # a remove may drop the empty folder between mkdir and the write
            record.parent.mkdir(exist_ok=True)
            try:
                tmp = record.with_name(f".{record.name}.tmp")
                tmp.write_text(json.dumps(owner), encoding="utf-8")
                os.replace(tmp, record)
                break
            except FileNotFoundError:
                continue
    except OSError as e:
        log.debug("cannot record that this run uses %s: %s", entry, e)
        return None
    _holds[entry] = handle = Hold(entry, record)
    if not entry.exists():
        with locked(entry):  # a remove renames it aside, checks for readers, then decides
            gone = not entry.exists()
        if gone:
            handle.release()
            raise FileNotFoundError(
                ENOENT, f"{entry}: removed (python -m packlm.cache) while this run opened it; "
                "run again to rebuild it",
            )  # fmt: skip
    return handle


def holders(entry: Path) -> list[dict]:
    """The live runs other than this one holding `entry` (records of dead ones are removed;
    one on another host counts as live: it cannot be told)."""
    found = []
    for path in sorted(in_use_dir(Path(entry)).glob("*.json")):
        owner = _read_owner(path)
        if not owner:  # records are renamed into place whole: this one is damaged
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        this = owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname()
        if this:
            continue
        if owner_alive(owner) is False:
            with contextlib.suppress(OSError):
                path.unlink()  # a run killed while it held the entry
            continue
        found.append(owner)
    return found


def refuse_if_in_use(entry: Path, owners: list[dict] | None = None) -> None:
    """EntryInUse, "<entry>: in use by process 4711 (python train.py ...); ...", when a live
    run other than this one holds `entry` (`owners`: its `holders`, when already read)."""
    owners = holders(entry) if owners is None else owners
    if owners:
        raise EntryInUse(EBUSY, in_use_message(entry, owners))


def in_use_message(entry: Path, owners: list[dict]) -> str:
    runs = ", ".join(_describe(o) for o in owners)
    return f"{entry}: in use by {runs}; stop it or wait for it to end, then remove it"


def release_dir(entry: Path) -> None:
    """After `entry` was removed: drop this process's record of it and its empty folder."""
    handle = _holds.get(Path(entry).resolve())
    if handle is not None:
        handle.release()
    with contextlib.suppress(OSError):
        in_use_dir(Path(entry)).rmdir()


def _describe(owner: dict) -> str:
    text = f"process {owner.get('pid', '?')}"
    if owner.get("host") != socket.gethostname():
        text += f" on {owner.get('host', 'another host')}"
    command = str(owner.get("command") or "")
    if command:
        text += f" ({command if len(command) <= 200 else command[:197] + '...'})"
    return text


def _command_line() -> str:
    try:
        argv = Path("/proc/self/cmdline").read_bytes().split(b"\0")
        return " ".join(a.decode(errors="replace") for a in argv if a)
    except OSError:
        return " ".join([sys.executable, *sys.argv])


@atexit.register
def _release_all() -> None:
    for handle in list(_holds.values()):
        handle.release()
