"""Stop a run whose loss or weights turn NaN or infinite, before it writes them anywhere.

`FiniteTraining` raises `TrainingDiverged` naming the first optimizer step whose loss is not
finite, and before a validation on non-finite weights; `LastCheckpoint` refuses to write
non-finite weights (`nonfinite_weight`), so `last.ckpt` keeps the last good step (the rule of
`packlm.checkpoint.last`).

Where the loss is on the CPU it is read every step (free). On an accelerator, reading it
would make the host wait for the device every step, so the first non-finite step is kept on
the device and read on the steps the Trainer logs (`log_every_n_steps`), before validation
and at the end: the run stops at most that many steps late, naming the first bad step, and
the weights it reached are never written (`LastCheckpoint`'s own check).
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from torch import Tensor

from packlm.callbacks.step_metrics import is_logging_step
from packlm.checkpoint.last import LastFile, TrainingDiverged, nonfinite_weight


class FiniteTraining(L.Callback):
    """Stop at the first step whose loss (summed over all ranks, so every rank agrees) is not
    finite, and before a validation on non-finite weights: without it a diverged run went on
    to its end, wrote NaN weights into last.ckpt and died in the text sampler.

    every_step: read the loss every step (None: where that is free, a loss on the CPU)."""

    def __init__(self, last: LastFile, every_step: bool | None = None):
        self.last = last
        self.every_step = every_step
        self._step_seen: int | None = None
        self._first_bad: Tensor | None = None  # device [2]: (first bad step or -1, its loss)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._step_seen = trainer.global_step
        self._first_bad = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, *args: Any) -> None:
        if trainer.global_step == self._step_seen:
            return  # inside an accumulation cycle: the step's loss is not summed yet
        self._step_seen = step = trainer.global_step
        loss = pl_module.last_loss
        on_host = not isinstance(loss, Tensor) or loss.device.type == "cpu"
        if self.every_step or (self.every_step is None and on_host):
            self._raise_if_not_finite(step, float(loss))
            return
        loss = torch.as_tensor(loss, dtype=torch.float64)
        this = torch.stack([torch.full_like(loss, step), loss])
        if self._first_bad is None:
            self._first_bad = torch.full_like(this, -1.0)
        first_seen = (self._first_bad[0] < 0) & ~torch.isfinite(loss)
        self._first_bad = torch.where(first_seen, this, self._first_bad)  # no read
        if is_logging_step(trainer, step):
            self._check()

    def _check(self) -> None:
        """Read the device's record of the first non-finite step (one sync)."""
        if self._first_bad is not None:
            step, loss = self._first_bad.tolist()
            if step >= 0:
                self._raise_if_not_finite(int(step), loss)

    def _raise_if_not_finite(self, step: int, loss: float) -> None:
        if not math.isfinite(loss):
            raise TrainingDiverged(step, f"the training loss is {loss}", self.last)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check()
        bad = nonfinite_weight(pl_module)
        if bad is not None:
            what = f"the weight {bad} is not finite (before validation)"
            raise TrainingDiverged(trainer.global_step, what, self.last)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check()
