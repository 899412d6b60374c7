"""Log the loss curves a second time: against supervised tokens, and where they are seen first.

- `SupervisedTokenAxis`: TensorBoard plots a scalar against its step; writing
  `*_by_tokens/...` with step = supervised targets seen lets runs with different windows
  and strides be compared at equal data on one chart.
- `LossFirst`: TensorBoard's Time Series page sorts tag groups by name (upper case first)
  and opens only the first two, so `train/loss` used to sit below `attention`, `data`,
  `epoch`, `grad_norm` ... ; `Loss/train`, `Loss/val`, `Loss/val_bpb` (same values, same
  steps) make the loss the first charts of a run (then `Packing`, the batch pictures).
  The original tags stay as they are.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

from packlm.callbacks.views.tensorboard import tensorboard_logger


class _Mirror(L.Callback):
    """Write chosen callback metrics again under other names: train ones every n steps,
    validation ones after each validation. Subclasses say the names and the step."""

    TRAIN: dict[str, str] = {}
    VAL: dict[str, str] = {}

    def __init__(self, every_n_steps: int = 10):
        self.every_n_steps = max(1, every_n_steps)
        self._last_step = -1

    def step(self, trainer: L.Trainer, pl_module: L.LightningModule) -> int:
        """The TensorBoard step of the copies (each subclass says which axis)."""
        return trainer.global_step

    @rank_zero_only
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        # With gradient accumulation several micro-batches share a global_step: write once.
        step = trainer.global_step
        if step != self._last_step and step % self.every_n_steps == 0:
            self._last_step = step
            self._write(trainer, pl_module, self.TRAIN)

    @rank_zero_only
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._write(trainer, pl_module, self.VAL)

    def _write(self, trainer, pl_module, names: dict[str, str]) -> None:
        logger = tensorboard_logger(trainer)
        if logger is None:
            return
        step = self.step(trainer, pl_module)
        for tag, name in names.items():
            value = trainer.callback_metrics.get(tag)
            if value is not None:
                logger.experiment.add_scalar(name, float(value), global_step=step)


class SupervisedTokenAxis(_Mirror):
    TRAIN = {"train/loss": "train_by_tokens/loss"}
    VAL = {"val/loss": "val_by_tokens/loss", "val/bpb": "val_by_tokens/bpb"}

    def step(self, trainer: L.Trainer, pl_module: L.LightningModule) -> int:
        return int(pl_module.supervised_tokens_seen)


class LossFirst(_Mirror):
    TRAIN = {"train/loss": "Loss/train"}
    VAL = {"val/loss": "Loss/val", "val/bpb": "Loss/val_bpb"}

    def step(self, trainer: L.Trainer, pl_module: L.LightningModule) -> int:
        # the step Lightning writes `self.log` values at (one behind global_step inside
        # on_train_batch_end), so Loss/train and train/loss share their points
        return trainer.fit_loop.epoch_loop._batches_that_stepped
