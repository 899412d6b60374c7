"""Crash-safe checkpoints: an atomic writer, `last.ckpt` every N steps, the val/loss-best one.

- `AtomicCheckpointIO` writes a checkpoint into a hidden temporary file next to its target,
  fsyncs it and renames it into place, so a kill or a full disk at any moment leaves either
  the previous file or the new one, never half of one. (Lightning's own writer stages the
  file in the system temp dir and *moves* it, which is a copy, not a rename, whenever /tmp is
  another filesystem.)
- `LastCheckpoint` writes `<dir>/last.ckpt` after every `every_n_steps` optimizer steps and
  at the end of training: a SIGKILL loses at most that many steps. At a step that also
  validates, the checkpoint is written after the validation, so a kill never loses a point.
- `LastCheckpoint` never writes non-finite weights (`finite_training.py` stops such a run);
  `graceful_stop.py` writes it on SIGTERM / Ctrl-C.
- `BestCheckpoint`: the val/loss-best checkpoint, written after its validation.

Checkpoints are written in `on_train_batch_end` after an optimizer step, the point where the
stateful train DataLoader's position and the loops' counters agree, so resuming from one
gives exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import ModelCheckpoint

from packlm.checkpoint.last import LAST, TrainingDiverged, nonfinite_weight
from packlm.errors import write_error
from packlm.runtime.lock_files import pid_alive

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into `.<name>.tmp-<pid>` beside the target, fsync, then os.replace."""

    def save_checkpoint(
        self,
        checkpoint: dict[str, Any],
        path: str | os.PathLike,
        storage_options: Any | None = None,
    ) -> None:
        if storage_options is not None or not _is_local(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(path)
        tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                out = _RecordingWriter(f)
                try:
                    torch.save(checkpoint, out)
                except RuntimeError:
                    # torch turns the OSError of a failed write (ENOSPC) into a RuntimeError
                    # ("unexpected pos ..."): surface the real one.
                    if out.error is not None:
                        raise out.error from None
                    raise
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            then = f"; the previous {path.name} (if any) is unchanged"
            raise write_error(
                e, f"checkpoint {path}", "point hydra.run.dir elsewhere", then
            ) from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)


class _RecordingWriter:
    """A file for torch.save that keeps the OSError of a failed write (torch hides it)."""

    def __init__(self, f: Any):
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def _is_local(path: str | os.PathLike) -> bool:
    return type(get_filesystem(path)).__name__ == "LocalFileSystem"


def _remove_stale_temporaries(path: Path) -> None:
    """Delete `.<name>.tmp-<pid>` files of processes that no longer exist (killed mid-write)."""
    for leftover in path.parent.glob(f".{path.name}.tmp-*"):
        pid = leftover.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            leftover.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class LastCheckpoint(L.Callback):
    """`<dirpath>/last.ckpt` every `every_n_steps` optimizer steps (None: only at the end)."""

    def __init__(self, dirpath: str | os.PathLike, every_n_steps: int | None = None):
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(
                f"train.checkpoint_every_n_steps={every_n_steps}: must be >= 1 or null"
            )
        self.dirpath = Path(dirpath)
        self.every_n_steps = every_n_steps
        self._step_seen: int | None = None  # global_step at the last on_train_batch_end
        self._step_saved: int | None = None
        self._deferred: int | None = None  # a step whose save waits for its validation
        self._fitting = False  # between on_train_start and on_train_end

    @property
    def path(self) -> Path:
        return self.dirpath / LAST

    @property
    def saved_step(self) -> int | None:
        """The global step this run last wrote into last.ckpt (None: not yet)."""
        return self._step_saved

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._step_seen = trainer.global_step  # a resumed run does not re-save its own state
        self._fitting = True

    def stepped(self, trainer: L.Trainer) -> bool:
        """Did the batch that just ended complete an optimizer step (not mid-accumulation)?"""
        return trainer.global_step != self._step_seen

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, *args: Any) -> None:
        if not self.stepped(trainer):
            return
        self._step_seen = trainer.global_step
        periodic = bool(self.every_n_steps) and trainer.global_step % self.every_n_steps == 0
        final = trainer.should_stop or 0 < trainer.max_steps <= trainer.global_step
        if self._deferred is not None or periodic or final:
            if validation_follows(trainer):
                self._deferred = trainer.global_step  # saved once this step's validation ends
            else:
                self._deferred = None
                self.save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A checkpoint due at a validation step is written after the validation: a kill
        # during it resumes from the previous checkpoint and validates this step again,
        # where a checkpoint written before it would resume past the point (Lightning
        # fast-forwards the validation due at a resumed on_train_batch_end checkpoint).
        if trainer.sanity_checking or not self._fitting:
            return
        if self._deferred == trainer.global_step:
            self._deferred = None
            self.save(trainer)
        elif self._step_saved == trainer.global_step:
            # a validation `validation_follows` did not foresee (a time-based
            # val_check_interval): this step's checkpoint is written again after it
            self.save(trainer, again=True)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Normally saved by the last on_train_batch_end already (the state a mid-epoch
        # resume expects); this covers the end of the last epoch under max_epochs.
        self._fitting = False
        if self._step_saved != trainer.global_step:
            self.save(trainer)

    def save(self, trainer: L.Trainer, again: bool = False) -> None:
        """Write last.ckpt (all ranks must call it: Lightning synchronizes inside); `again`:
        also where this step's checkpoint is written already. Weights that are not all
        finite raise TrainingDiverged and leave the previous file."""
        if trainer.fast_dev_run or (self._step_saved == trainer.global_step and not again):
            return  # (the same decision on every rank: no file-system check here)
        bad = nonfinite_weight(trainer.lightning_module)  # the same on every rank (DDP)
        if bad is not None:
            raise TrainingDiverged(trainer.global_step, f"the weight {bad} is not finite", self)
        trainer.save_checkpoint(self.path, weights_only=False)  # the full training state
        self._step_saved = trainer.global_step


def validation_follows(trainer: L.Trainer) -> bool:
    """Will Lightning validate right after the training batch that just ended?

    Lightning 2.6's own rule (its training epoch loop's should-check-val test) from the
    Trainer's public state: the epoch must be a validation epoch
    (`check_val_every_n_epoch`); a stop requested once min_steps/min_epochs are met
    validates; else every `val_check_batch`-th batch (counted over the run when
    check_val_every_n_epoch is None, else within the epoch), or the last batch of an
    epoch of unknown length. A time-based val_check_interval cannot be foreseen: False.
    tests/callbacks/test_validation_follows.py checks the rule against Lightning's runs.
    """
    every = trainer.check_val_every_n_epoch
    if not trainer.enable_validation or (
        every is not None and (trainer.current_epoch + 1) % every != 0
    ):
        return False
    fit = trainer.fit_loop
    met_min_epochs = not fit.min_epochs or fit.epoch_progress.current.processed >= fit.min_epochs
    met_min_steps = not fit.min_steps or trainer.global_step >= fit.min_steps
    if trainer.should_stop and met_min_epochs and met_min_steps:
        return True
    interval = trainer.val_check_batch
    if interval is None:  # time-based
        return False
    if interval == float("inf"):  # a train DataLoader without a length
        limit = trainer.limit_train_batches
        if isinstance(limit, int):
            return (fit.epoch_loop.batch_idx + 1) % limit == 0 or trainer.is_last_batch
        return trainer.is_last_batch
    batch = fit.epoch_loop.total_batch_idx if every is None else fit.epoch_loop.batch_idx
    return (batch + 1) % int(interval) == 0


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint (the best checkpoints by a metric), in the run's own
    checkpoints/ folder: a resume writes into a folder that holds this run's checkpoints,
    which is expected, so Lightning's "exists and is not empty" warning is not given (that
    one message, for this folder, while Lightning's setup runs)."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        with warnings.catch_warnings():
            if self.dirpath is not None:
                warnings.filterwarnings(
                    "ignore",
                    message=re.escape(
                        f"Checkpoint directory {self.dirpath} exists and is not empty"
                    ),
                    category=UserWarning,
                )
            super().setup(trainer, pl_module, stage)
