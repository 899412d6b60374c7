"""The run's TensorBoard logger, wherever it sits among the Trainer's loggers.

The `logger` config group may hold several loggers (TensorBoard, CSV, W&B ...) in any order;
the pictures, tables and HParams rows go to TensorBoard's writer only.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger


def tensorboard_logger(trainer: Any) -> TensorBoardLogger | None:
    """The first TensorBoardLogger of `trainer.loggers`, or None."""
    loggers = getattr(trainer, "loggers", None) or []
    return next((lg for lg in loggers if isinstance(lg, TensorBoardLogger)), None)
