"""SIGTERM and the first Ctrl-C: finish the optimizer step in flight, write `last.ckpt`,
raise `TrainingStopped`, whose message ends with the whole command that resumes the run
(`resume_command`); all ranks agree on the step to stop at. A second Ctrl-C interrupts at
once (Lightning's KeyboardInterrupt path, no checkpoint)."""

from __future__ import annotations

import logging
import re
import shlex
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

if TYPE_CHECKING:
    from packlm.callbacks.checkpointing import LastCheckpoint

log = logging.getLogger(__name__)


class TrainingStopped(Exception):
    """Training stopped cleanly on a signal after writing a checkpoint."""

    def __init__(self, signum: int, step: int, checkpoint: Path):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {name} after step {step}, checkpoint written; resume with:\n"
            f"  {resume_command(checkpoint)}"
        )

    @property
    def exit_code(self) -> int:
        """128 + signal number, as a shell reports a process ended by that signal."""
        return 128 + self.signum


def resume_command(checkpoint: Path) -> str:
    """`python train.py ckpt_path=<checkpoint>`, to paste into a shell in any folder: the path
    absolute, in Hydra's quotes where its grammar would read a character of it (`,` makes a
    sweep, `=`, brackets, quotes, spaces), then in the shell's."""
    path = str(Path(checkpoint).resolve())
    if re.search(r"[^A-Za-z0-9_/.-]", path):  # a backslash escapes only before ' or the end
        path = "'" + re.sub(r"(\\*)('|$)", _escaped, path) + "'"
    return f"python train.py {shlex.quote(f'ckpt_path={path}')}"


def _escaped(match: re.Match) -> str:
    slashes, quote = match.groups()
    return slashes * 2 + ("\\'" if quote else "")


class GracefulStop(L.Callback):
    """SIGTERM / first SIGINT: finish the step, write last.ckpt, raise TrainingStopped."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, last: LastCheckpoint):
        self.last = last
        self.received: int | None = None
        self._step_seen: int | None = None
        self._previous: dict[int, Any] = {}

    # Registered in on_train_start, after Lightning installed its own SIGTERM handler (which
    # stops at the end of the batch without a checkpoint); Lightning's teardown restores the
    # handlers that were there before fit.
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._trainer = trainer
        self._step_seen = trainer.global_step
        if trainer.received_sigterm:  # arrived while Lightning's own handler was installed
            self.received = signal.SIGTERM
        for signum in self.SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.received is not None:
            raise KeyboardInterrupt  # second Ctrl-C: stop now
        first = self.received is None
        self.received = signum
        log.warning(
            "received %s: stopping after the current optimizer step (Ctrl-C again to abort now)",
            signal.Signals(signum).name,
        )
        launcher = getattr(self._trainer.strategy, "launcher", None)
        if first and signum == signal.SIGTERM and hasattr(launcher, "kill"):
            launcher.kill(signum)  # DDP children started by this process stop too

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, *args: Any) -> None:
        if trainer.global_step == self._step_seen:
            return  # inside an accumulation cycle: no consistent state to save
        self._step_seen = trainer.global_step
        stop = self.received is not None
        if trainer.world_size > 1:  # every rank stops at the same step, or collectives hang
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if not stop:
            return
        signum = self.received or signal.SIGTERM  # another rank got the signal
        self.last.save(trainer)
        rank_zero_info(
            f"{signal.Signals(signum).name}: saved {self.last.path} at step {trainer.global_step}"
        )
        raise TrainingStopped(signum, trainer.global_step, self.last.path)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) == self._handle and handler is not None:
                signal.signal(signum, handler)
        self._previous = {}
