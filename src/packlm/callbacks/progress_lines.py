"""Progress as plain log lines, for a run nobody watches in a terminal, and one line per
validation.

The rich bar draws only in a terminal: `python train.py > log 2>&1` (SLURM, nohup, CI) showed
nothing between the model line and the summary. Without a terminal, `ProgressLines` logs
the line nanoGPT and torchtitan print, every `train.progress_every_seconds` and/or
`train.progress_every_n_steps`: step/total (the total the bar uses:
`progress_bar.run_batches_left`), epoch, train loss, tokens/s, supervised tokens, elapsed, ETA.
Every validation logs one line when it ends (step, val/loss, val/bpb, how long it took), in
a terminal too, and without a terminal one when it starts (a large validation set is minutes
of silence otherwise). They go through Python logging, so Hydra writes them to the run's
job.log as well as the console.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from typing import Any

import lightning as L

from packlm.callbacks.progress_bar import TokenBudget, run_batches_left

log = logging.getLogger(__name__)


def clock(seconds: float) -> str:
    """Seconds as H:MM:SS."""
    return str(datetime.timedelta(seconds=round(seconds)))


def duration(seconds: float) -> str:
    """Seconds as `4.2 s` under a minute, else H:MM:SS."""
    return f"{seconds:.1f} s" if seconds < 60 else clock(seconds)


class ProgressLines(L.Callback):
    """Log a progress line every `every_seconds` / `every_n_steps` (`lines=False`: only the
    validation lines, for a run that has the bar)."""

    def __init__(
        self,
        every_seconds: float | None = 30.0,
        every_n_steps: int | None = None,
        lines: bool = True,
        budget: TokenBudget | None = None,
    ) -> None:
        self.every_seconds, self.every_n_steps = every_seconds, every_n_steps
        self.lines = lines and (every_seconds is not None or every_n_steps is not None)
        self.budget = budget  # the token budget the total follows (compose sets it)
        self._start = self._last_time = 0.0
        self._last_step = -1  # the step the last line was written at
        self._last_tokens = 0
        self._paced: tuple[float, int] | None = None  # (time, batches) at the first batch end
        self._batches = 0
        self._validation_start: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self._last_time = time.monotonic()
        self._last_step = trainer.global_step
        self._last_tokens = int(getattr(pl_module, "supervised_tokens_seen", 0))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._batches += 1
        now = time.monotonic()
        if self._paced is None:
            self._paced = (now, self._batches)
        step = trainer.global_step
        if not (self.lines and trainer.is_global_zero) or step == self._last_step:
            return
        due_time = self.every_seconds is not None and now - self._last_time >= self.every_seconds
        due_steps = self.every_n_steps is not None and step % self.every_n_steps == 0
        if due_time or due_steps:
            log.info("%s", self.line(trainer, pl_module, now))
            self._last_time, self._last_step = now, step
            self._last_tokens = int(pl_module.supervised_tokens_seen)

    def line(self, trainer: L.Trainer, pl_module: Any, now: float) -> str:
        """step/total, epoch, loss, tokens/s since the previous line, tokens, elapsed, ETA."""
        step, tokens = trainer.global_step, int(pl_module.supervised_tokens_seen)
        pace = self._pace(now)
        left = run_batches_left(trainer, self.budget, pace)
        total, eta = "?", "?"
        if left is not None and not math.isinf(left):
            total = str(step + math.ceil(left / trainer.accumulate_grad_batches))
            eta = clock(left * pace) if pace is not None else "?"
        rate = (tokens - self._last_tokens) / max(now - self._last_time, 1e-9)
        return (
            f"step {step}/{total} | epoch {trainer.current_epoch} | "
            f"loss {float(pl_module.last_loss):.4f} | {rate:,.0f} tokens/s | "
            f"{tokens:,} supervised tokens | {clock(now - self._start)} elapsed, ETA {eta}"
        )

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        self._validation_start = time.monotonic()
        if self.lines:
            batches = sum(trainer.num_val_batches)
            size = f" ({batches:,} batches)" if math.isfinite(batches) else ""
            log.info("validating at step %d%s ...", trainer.global_step, size)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        loss, bpb = (float(metrics.get(k, math.nan)) for k in ("val/loss", "val/bpb"))
        took = ""
        if self._validation_start is not None:
            took = f" (took {duration(time.monotonic() - self._validation_start)})"
            self._validation_start = None
        log.info(
            "validation at step %d: val/loss %.4f, val/bpb %.4f%s",
            trainer.global_step, loss, bpb, took,
        )  # fmt: skip

    def _pace(self, now: float) -> float | None:
        """Seconds per batch since this process's first batch (None before two)."""
        if self._paced is None or self._batches <= self._paced[1]:
            return None
        return (now - self._paced[0]) / (self._batches - self._paced[1])
