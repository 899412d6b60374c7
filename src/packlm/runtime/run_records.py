"""A run folder's launch and resume records: written once the run is accepted, read by every
command that resumes or explains the run.

Hydra writes a command's config before packlm has looked at it. So Hydra writes it into a
pending folder, `<run>/.hydra-pending-<pid>` (conf/config.yaml, `hydra.output_subdir`), and
train() makes it a record only once every check has passed (`commit`), just before the run
builds its loggers and trains:
- a fresh run's pending folder becomes `<run>/.hydra` (its launch record, step 0);
- a resume's becomes `<run>/.hydra/resume-<time>`, holding the config the resume trains with
  (the run's own settings merged with the command line's: `config.yaml`) and `resume.yaml`,
  the step it starts at (the checkpoint's global_step).
A refused command discards its pending folder (`discard_pending`); one killed before it was
accepted leaves it, which no reader looks at, and the next accepted run of the folder removes
it. So a refused or killed command changes nothing a later command reads.

Readers: `run_records` (oldest first: what a resume merges) and `record_at` (the record in
force at an optimizer step: what trace, stats and compare explain). A resume from step k
supersedes every record that started at k or later (their steps were trained again).
A resume record of packlm <= 0.x (no `resume.yaml`: it may be a refused command's) still
gives its overrides to a resume, but its step is unknown, so no tool explains a step by it.

Kept free of torch, Lightning and Hydra's runtime: the tools read it at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from packlm.runtime.lock_files import pid_alive
from packlm.runtime.run_folder import RANK_VARIABLES

log = logging.getLogger(__name__)

RECORDS = ".hydra"
PENDING_PREFIX = ".hydra-pending-"
RESUME_PREFIX = "resume-"
START_FILE = "resume.yaml"  # {step: the first optimizer step the resume trained}
OLD_RUN_FILES = {  # what a replaced run leaves behind, beside its records
    "checkpoints": ("*.ckpt",),
    "tb": ("**/events.out.tfevents.*", "**/hparams.yaml"),
    "csv": ("metrics.csv", "hparams.yaml"),
}


def pending_subdir() -> str | None:
    """`hydra.output_subdir`: this process's pending record; None (Hydra writes nothing) on a
    rank > 0 started by torchrun or SLURM, which runs in rank 0's folder."""
    if next((os.environ[v] for v in RANK_VARIABLES if v in os.environ), "0") != "0":
        return None
    return f"{PENDING_PREFIX}{os.getpid()}"


@dataclass(frozen=True)
class Record:
    """One launch or resume of a run: its folder and the first optimizer step it trained
    (None: a record of an older packlm, whose step is unknown)."""

    path: Path
    start_step: int | None

    def overrides(self) -> list[str]:
        path = self.path / "overrides.yaml"
        return [str(o) for o in (OmegaConf.load(path) or [])] if path.is_file() else []

    def config(self) -> DictConfig | None:
        """The config the run trained with from `start_step` on (unresolved, as Hydra saves)."""
        path = self.path / "config.yaml"
        return OmegaConf.load(path) if path.is_file() else None


def run_folder_of(ckpt_path: Path) -> Path:
    """The run folder a checkpoint belongs to (`<run>/checkpoints/x.ckpt` -> `<run>`)."""
    parent = Path(ckpt_path).resolve().parent
    return parent.parent if parent.name == "checkpoints" else parent


def run_records(run_dir: Path) -> list[Record]:
    """The run's accepted records, oldest first: its launch, then each resume."""
    records = Path(run_dir) / RECORDS
    if not any((records / name).is_file() for name in ("overrides.yaml", "config.yaml")):
        return []
    found = [Record(records, 0)]
    for path in sorted(records.glob(f"{RESUME_PREFIX}*/")):  # the names sort by time
        found.append(Record(path, _start_step(path)))
    return found


def _start_step(record: Path) -> int | None:
    """The step a resume record starts at; None where it has none or a damaged one (then no
    tool explains a step by it)."""
    try:
        loaded = OmegaConf.load(record / START_FILE)
        step = loaded.get("step") if isinstance(loaded, DictConfig) else None
    except Exception:  # missing, unreadable, not YAML: the record of an older packlm or damaged
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def timeline(run_dir: Path) -> list[Record]:
    """The records the run's weights came from, in step order: a resume from step k replaces
    the records that started at k or later (a resume from an earlier checkpoint)."""
    kept: list[Record] = []
    for record in run_records(run_dir):
        if record.start_step is None:
            continue  # an older packlm's: its step is unknown
        kept = [r for r in kept if r.start_step < record.start_step] + [record]
    return kept


def record_at(run_dir: Path, step: int | None = None) -> Record | None:
    """The record in force at optimizer step `step` (0-based, as logged; None: the run's
    last); None when the folder holds no record."""
    kept = timeline(run_dir)
    if step is None:
        return kept[-1] if kept else None
    return next((r for r in reversed(kept) if r.start_step <= step), None)


def overrides_in_force(run_dir: Path) -> list[str]:
    """The overrides the run trains with now, oldest first (the later one of a key wins)."""
    return [o for record in timeline(run_dir) for o in record.overrides()]


def _pending_of_this_process() -> Path | None:
    """This command's pending record folder, if Hydra wrote one."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    subdir = hydra.get("output_subdir")
    if not subdir or not str(subdir).startswith(PENDING_PREFIX):
        return None
    pending = Path(hydra.runtime.output_dir) / str(subdir)
    return pending if pending.is_dir() else None


def commit(run_dir: Path, cfg: DictConfig, start_step: int | None) -> None:
    """Make this command's pending record the run's (train() calls it once the run is
    accepted, holding the run lock); `start_step` None: a fresh run, which replaces whatever
    an earlier run left in the folder (a fresh run is refused where that holds checkpoints,
    unless overwrite_run=true). Without Hydra (train(cfg) from Python) nothing is written."""
    run_dir = Path(run_dir)
    pending = _pending_of_this_process()
    if start_step is None:
        _remove_old_run(run_dir, records=pending is not None)
    if pending is not None:
        if start_step is None:
            shutil.move(pending, run_dir / RECORDS)
        else:
            OmegaConf.save(cfg, pending / "config.yaml")  # merged: what this resume trains
            OmegaConf.save(OmegaConf.create({"step": int(start_step)}), pending / START_FILE)
            (run_dir / RECORDS).mkdir(exist_ok=True)
            shutil.move(pending, _new_resume_name(run_dir / RECORDS))
    _remove_dead_pending(run_dir)


def _new_resume_name(records: Path) -> Path:
    name = f"{RESUME_PREFIX}{datetime.now():%Y-%m-%d_%H-%M-%S}"
    path, n = records / name, 1
    while path.exists():  # two resumes in one second
        path, n = records / f"{name}.{n}", n + 1
    return path


def _remove_old_run(run_dir: Path, records: bool) -> None:
    """What an earlier run of this folder left (its checkpoints, TensorBoard and CSV logs, and
    with `records` its .hydra/, which this run's replaces), file by file: a folder of the
    user's that shares a name (`tb/`, `csv/`) keeps everything else. Without Hydra (train(cfg)
    from Python) a .hydra/ there is the caller's."""
    old = old_run_files(run_dir, records)
    if not old:
        return
    log.info("%s: the new run replaces what an earlier run left there (%s)", run_dir,
             ", ".join(sorted({p.relative_to(run_dir).parts[0] for p in old})))  # fmt: skip
    for path in old:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for part in OLD_RUN_FILES:  # the folders left empty
        for folder in sorted((run_dir / part).glob("**/"), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                folder.rmdir()


def old_run_files(run_dir: Path, records: bool = True) -> list[Path]:
    """What a fresh run in `run_dir` replaces: an earlier run's checkpoints, TensorBoard and
    CSV files, and with `records` its .hydra/."""
    old = [run_dir / RECORDS] if records and (run_dir / RECORDS).is_dir() else []
    for part, patterns in OLD_RUN_FILES.items():
        old += [p for pattern in patterns for p in (run_dir / part).glob(pattern) if p.is_file()]
    return old


def _remove_dead_pending(run_dir: Path) -> None:
    """Pending records of commands killed before they were accepted (their pid is gone)."""
    for path in run_dir.glob(f"{PENDING_PREFIX}*"):
        pid = path.name[len(PENDING_PREFIX) :]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def discard_pending() -> None:
    """Remove this command's pending record if it was not committed (a refused command)."""
    pending = _pending_of_this_process()
    if pending is not None:
        with contextlib.suppress(OSError):
            shutil.rmtree(pending)


def settings_of(config: DictConfig | None) -> dict[str, Any]:
    """A record's config as plain values, packlm's resolvers registered (`${packlm...}`)."""
    from packlm.config.schema import register_configs

    if config is None:
        return {}
    register_configs()
    return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
