"""The run's TensorBoard logger, wherever it sits among the Trainer's loggers.

The `logger` config group may hold several loggers (TensorBoard, CSV, W&B ...) in any order;
the pictures, tables and HParams rows go to TensorBoard's writer only.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only


def tensorboard_logger(trainer: Any) -> TensorBoardLogger | None:
    """The first TensorBoardLogger of `trainer.loggers`, or None."""
    loggers = getattr(trainer, "loggers", None) or []
    return next((lg for lg in loggers if isinstance(lg, TensorBoardLogger)), None)


class FirstBatchView(L.Callback):
    """Shows something of the first training batch once, on the run's TensorBoard (rank 0):
    subclasses say what in `show(writer, batch, step)`."""

    def __init__(self) -> None:
        self.done = False

    def show(self, writer: Any, batch: Any, step: int) -> None:
        """Write the view of `batch` (subclasses; the base shows nothing)."""

    @rank_zero_only
    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        logger = tensorboard_logger(trainer)
        if self.done or logger is None:
            return
        self.done = True
        self.show(logger.experiment, batch, trainer.global_step)
