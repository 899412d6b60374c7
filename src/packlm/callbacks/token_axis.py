"""Log the loss curves a second time, against supervised tokens.

TensorBoard plots a scalar against its step; writing `*_by_tokens/...` with step =
supervised targets seen lets runs with different windows and strides be compared at equal
data on one chart. They go to the run logger's own `by_tokens` writer
(`packlm.train.tensorboard.RunTensorBoard`, the sub-run `tb/by_tokens`), so that a resume's
`purge_step` is counted in tokens there and in steps for every other curve.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

from packlm.callbacks.views.tensorboard import tensorboard_logger

BY_TOKENS = "by_tokens"
"""The sub-directory of the TensorBoard log dir the token-axis curves are written in."""


class SupervisedTokenAxis(L.Callback):
    """train/loss every n steps and val/loss, val/bpb after each validation, at step =
    supervised tokens seen, on the `by_tokens` writer (nothing without one)."""

    TRAIN = {"train/loss": "train_by_tokens/loss"}
    VAL = {"val/loss": "val_by_tokens/loss", "val/bpb": "val_by_tokens/bpb"}

    def __init__(self, every_n_steps: int = 10):
        self.every_n_steps = max(1, every_n_steps)
        self._last_step = -1

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
        writer = getattr(tensorboard_logger(trainer), "by_tokens", None)
        if writer is None:
            return
        step = int(pl_module.supervised_tokens_seen)
        for tag, name in names.items():
            value = trainer.callback_metrics.get(tag)
            if value is not None:
                writer.add_scalar(name, float(value), global_step=step)
