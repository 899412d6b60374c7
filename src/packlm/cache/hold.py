"""Entries in use: a run holds the entries it opened for the rest of its life.

A record per process (pid, start time, host, command line) in `.<name>.in-use/` beside the
entry, which `python -m packlm.cache` reads (`holders`) to refuse removing an entry a live
run reads (before, the run died at its next validation). A record is judged by its owner's
liveness, never by a lock a forked worker could inherit, so a killed run's record is simply
stale; the next run to release the entry drops it, so a kill leaves no folder behind.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import sys
from dataclasses import dataclass
from errno import EBUSY, ENOENT
from pathlib import Path

from packlm.cache.lock import locked
from packlm.runtime.lock_files import owner_alive, owner_record, read_owner

log = logging.getLogger(__name__)


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
        holders(self.path)  # drops the records of runs killed while they held the entry
        with contextlib.suppress(OSError):
            self.record.parent.rmdir()  # only when no other live run holds the entry

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
    owner = owner_record(command=_command_line())
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
        owner = read_owner(path)
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


def _forget_parent_holds() -> None:
    _holds.clear()  # the parent's in-use records stay the parent's: the child never removes them


os.register_at_fork(after_in_child=_forget_parent_holds)
