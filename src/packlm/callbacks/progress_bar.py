"""The terminal progress bar: Lightning's, with a total that follows what ends the run.

Lightning's bar counts the batches of an epoch and ends at the epoch's length, or at
trainer.max_steps counted from the epoch's start, so a run ended by train.max_supervised_tokens
showed `60/43687 ... 9:18:17` for a job of 150 steps, and a resumed run `300/218` (the
position in the epoch against the steps left). Here the total is the batch of this epoch at
which the run is expected to end, from whichever limit comes first: trainer.max_steps, the
token budget (the DataModule's expected supervised tokens per batch, as the schedule's
horizon is sized) or trainer.max_time (the time left at this process's pace), re-estimated
after every batch; the ETA follows. Both of Lightning's bars get it through the public
`total_train_batches`: the rich one (which also writes "Epoch 3", not "Epoch 3/-2", without
an epoch limit) and, without `rich` installed, the tqdm one.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar, Timer, TQDMProgressBar


@dataclass(frozen=True)
class TokenBudget:
    """train.max_supervised_tokens and how many global batches train a number of targets
    (packlm.data.epoch.curriculum.expected_batches over the DataModule's rates)."""

    tokens: int
    batches_for: Callable[[float], float]

    def batches_left(self, seen: float) -> float:
        return max(0.0, self.batches_for(self.tokens) - self.batches_for(min(seen, self.tokens)))


def batches_left(
    steps_left: int | None,
    accumulate: int,
    budget_batches: float | None,
    seconds_left: float | None,
    seconds_per_batch: float | None,
) -> float | None:
    """Batches until the first limit ends the run (None: none but the epochs): the optimizer
    steps left x accumulate_grad_batches, the token budget's batches, the time left at the
    measured pace."""
    limits = []
    if steps_left is not None:
        limits.append(max(0, steps_left) * accumulate)
    if budget_batches is not None:
        limits.append(budget_batches)
    if seconds_left is not None and seconds_per_batch:
        limits.append(max(0.0, seconds_left) / seconds_per_batch)
    return min(limits) if limits else None


def run_batches_left(
    trainer: L.Trainer, budget: TokenBudget | None, seconds_per_batch: float | None
) -> float | None:
    """Batches until the run's first limit (`batches_left` over the Trainer's state): what
    the bar's total and the progress lines' step total both come from."""
    steps_left = trainer.max_steps - trainer.global_step if trainer.max_steps > 0 else None
    module = trainer.lightning_module
    budget_left = (
        budget.batches_left(getattr(module, "supervised_tokens_seen", 0))
        if budget is not None
        else None
    )
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    seconds_left = timer.time_remaining() if timer is not None else None
    return batches_left(
        steps_left, trainer.accumulate_grad_batches, budget_left, seconds_left, seconds_per_batch
    )


def bar_total(epoch_batches: float, done: int, left: float | None) -> float:
    """The bar's total: the batch of this epoch at which the run ends (`done` batches of the
    epoch trained, `left` to go), at most the epoch's length."""
    if left is None:
        return epoch_batches
    return min(epoch_batches, done + math.ceil(left))


class RunTotal:
    """The `total_train_batches` of a bar that ends where the run ends (mixed into both of
    Lightning's bars); `done` and the pace are kept from the public batch hooks."""

    def __init__(self, budget: TokenBudget | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.budget = budget
        self._done = 0  # batches of the current epoch trained (a resume starts mid-epoch)
        self._paced: tuple[float, int] | None = None  # (time, batches) at the first batch end
        self._batches = 0  # batches this process trained

    @property
    def total_train_batches(self) -> int | float:
        trainer = self.trainer
        left = run_batches_left(trainer, self.budget, self._pace())
        return bar_total(trainer.num_training_batches, self._done, left)

    def _pace(self) -> float | None:
        """Seconds per batch of this process since its first batch (None before two)."""
        if self._paced is None or self._batches <= self._paced[1]:
            return None
        return (time.monotonic() - self._paced[0]) / (self._batches - self._paced[1])

    def _count(self, batch_idx: int) -> None:
        self._done = batch_idx + 1
        self._batches += 1
        if self._paced is None:
            self._paced = (time.monotonic(), self._batches)


class EpochProgressBar(RunTotal, RichProgressBar):
    """RichProgressBar ending where the run ends, whose epoch label drops a missing limit."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._done = 0
        super().on_train_epoch_start(trainer, pl_module)
        self._drop_epoch_limit(trainer)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._count(batch_idx)
        if self.progress is not None and self.train_progress_bar_id is not None:
            self.progress.update(self.train_progress_bar_id, total=self.total_train_batches)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)  # may create
        self._drop_epoch_limit(trainer)  # the task (a resume)

    def _drop_epoch_limit(self, trainer: L.Trainer) -> None:
        limit = trainer.max_epochs
        if limit is None or limit >= 0 or self.progress is None:
            return
        if self.train_progress_bar_id is None:
            return
        description = self.train_progress_bar.description
        suffix = f"/{limit - 1}"
        if suffix in description:
            self.progress.update(
                self.train_progress_bar_id, description=description.replace(suffix, "", 1)
            )


class RunProgressBar(RunTotal, TQDMProgressBar):
    """Lightning's tqdm bar (without `rich`) ending where the run ends."""

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._done = 0
        super().on_train_epoch_start(trainer, *args)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._count(batch_idx)
        total = self.total_train_batches
        self.train_progress_bar.total = None if math.isinf(total) else total  # tqdm's unknown
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


def rich_available() -> bool:
    return importlib.util.find_spec("rich") is not None
