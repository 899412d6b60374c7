"""The folder a run or a sweep writes into, made and probed before anything is written there.

Kept apart from `packlm.train` (which imports torch and Lightning) because Hydra instantiates
`WritableRunDir` for every command composed from conf/config.yaml, prepare and stats too.
A folder a live run holds (`<run>/.run.lock`, packlm.train.run_lock) is refused here too, before
Hydra rewrites its `.hydra/` (which then made the live run unresumable).
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from pathlib import Path

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from packlm.errors import one_line_errors
from packlm.runtime.lock_files import owner_alive, read_owner

LOCK_NAME = ".run.lock"
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")  # Lightning's


class RunLocked(RuntimeError):
    """Another live process trains in this run folder."""


class RunFolderTaken(RuntimeError):
    """A fresh run was pointed at a folder that holds another run's checkpoints."""


def check_fresh_folder(run_dir: Path) -> None:
    """RunFolderTaken when `run_dir` holds a run's checkpoints: a fresh run there would replace
    them (the same command typed twice, a reused hydra.run.dir). The line says how to resume
    that run, where else to write, and the key that replaces it."""
    run_dir = Path(run_dir)
    found = sorted((run_dir / "checkpoints").glob("*.ckpt"), key=lambda p: p.name != "last.ckpt")
    if not found:
        return
    raise RunFolderTaken(
        f"{run_dir} holds a run ({found[0].relative_to(run_dir)}): resume it with "
        f"`python train.py ckpt_path={found[0]}`, give the new run another folder "
        "(hydra.run.dir=...), or replace that run with overwrite_run=true"
    )


PACKLM_SECTIONS = {"model", "data", "tokenizer", "trainer"}
"""The top-level keys of every config packlm's train.py records in <run>/.hydra/config.yaml."""


def trained_here(run_dir: Path) -> bool:
    """Did packlm train in `run_dir`? Every run holds `<run>/.run.lock` (kept, emptied, when
    it ends); every run from Hydra records a .hydra/config.yaml with packlm's sections."""
    run_dir = Path(run_dir)
    if (run_dir / LOCK_NAME).is_file():
        return True
    try:
        config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(config, dict) and config.keys() >= PACKLM_SECTIONS


def check_not_foreign(run_dir: Path) -> None:
    """RunFolderTaken when a fresh run would replace files in `run_dir` that packlm did not
    write (checkpoints, TensorBoard or CSV logs, a .hydra/ of another program: a home
    directory, `hydra.run.dir=.` in another project): overwrite_run replaces only a run
    packlm trained there, never another tool's files. Call it before this run's lock exists."""
    from packlm.runtime.run_records import old_run_files  # it imports this module

    run_dir = Path(run_dir)
    if trained_here(run_dir):
        return
    found = sorted({str(p.relative_to(run_dir)) for p in old_run_files(run_dir)})
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise RunFolderTaken(
            f"{run_dir} holds files packlm did not write ({shown}; no packlm run trained "
            "there): a new run would replace them, and overwrite_run=true replaces only a "
            "packlm run; give the new run another folder (hydra.run.dir=...)"
        )


def in_use_message(run_dir: Path, owner: dict) -> str:
    holder = (
        f"process {owner.get('pid', '?')} on {owner.get('host', '?')}, "
        f"started {owner.get('started', '?')}"
    )
    return (
        f"{run_dir} is in use by another run ({holder}): two runs in one folder would "
        "overwrite each other's checkpoints; wait for it to end, or stop it"
    )


def check_not_in_use(run_dir: Path) -> None:
    """RunLocked when a live process holds `<run_dir>/.run.lock`. Reads only: the owner record
    first (cleared at release; a dead owner's is left for train() to break), then, for a live
    or unknown owner, a shared flock probe, so a run that never starts a lock is not delayed."""
    path = Path(run_dir) / LOCK_NAME
    owner = read_owner(path)
    if not owner or owner_alive(owner) is False:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunLocked(in_use_message(Path(run_dir), owner)) from None
    finally:
        os.close(fd)  # drops the probe's shared lock


def check_writable(directory: Path, what: str) -> None:
    """Create `directory` and a probe file in it; a clear error if either fails."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".packlm-write-test-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        hint = "disk full" if e.errno == errno.ENOSPC else e.strerror or str(e)
        raise OSError(e.errno, f"{what} {directory} is not writable ({hint})") from e


class WritableRunDir(Callback):
    """Hydra callback (conf/config.yaml, hydra.callbacks): the run or sweep directory is made
    and probed before Hydra writes .hydra/ into it, so a read-only or impossible
    hydra.run.dir is one `error:` line (exit 1), not Hydra's traceback; and a run directory
    a live run holds, or a fresh run into one holding another run's checkpoints, is refused
    (one line, exit 1) before anything is written there."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        subdir = config.hydra.get("output_subdir", ".hydra")
        writes_config = subdir is not None  # not the tools, not DDP ranks > 0
        rank = next((os.environ[v] for v in RANK_VARIABLES if v in os.environ), "0")
        if writes_config and rank == "0":  # ranks > 0 run in rank 0's held folder by design
            with one_line_errors(RunLocked, RunFolderTaken):  # before the write probe: a
                check_not_in_use(Path(config.hydra.run.dir))  # refusal touches nothing
                if not config.get("ckpt_path"):
                    check_not_foreign(Path(config.hydra.run.dir))
                if not config.get("ckpt_path") and not config.get("overwrite_run"):
                    check_fresh_folder(Path(config.hydra.run.dir))
        self._check(config.hydra.run.dir, "the run directory (hydra.run.dir)")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config.hydra.sweep.dir, "the sweep directory (hydra.sweep.dir)")

    @staticmethod
    def _check(directory: str, what: str) -> None:
        with one_line_errors(OSError):
            check_writable(Path(directory), what)
