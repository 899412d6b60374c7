"""Log the curves a second time against cumulative supervised tokens instead of steps.

TensorBoard plots a scalar against its step; writing `*_by_tokens/...` with
step = supervised targets seen lets runs with different windows and strides be compared
at equal data on one chart.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

TRAIN_TAGS = ("train/loss",)
VAL_TAGS = ("val/loss", "val/bpb")


class SupervisedTokenAxis(L.Callback):
    def __init__(self, every_n_steps: int = 10):
        self.every_n_steps = max(1, every_n_steps)
        self._last_step = -1

    @rank_zero_only
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        # With gradient accumulation several micro-batches share a global_step: write once.
        step = trainer.global_step
        if step != self._last_step and step % self.every_n_steps == 0:
            self._last_step = step
            self._write(trainer, pl_module, TRAIN_TAGS, "train_by_tokens")

    @rank_zero_only
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._write(trainer, pl_module, VAL_TAGS, "val_by_tokens")

    def _write(self, trainer, pl_module, tags, prefix: str) -> None:
        logger = trainer.logger
        if not isinstance(logger, TensorBoardLogger):
            return
        tokens = int(pl_module.supervised_tokens_seen)
        for tag in tags:
            value = trainer.callback_metrics.get(tag)
            if value is not None:
                name = tag.split("/", 1)[1]
                logger.experiment.add_scalar(f"{prefix}/{name}", float(value), global_step=tokens)
