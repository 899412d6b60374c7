"""Stop a run whose loss or weights turn NaN or infinite, before it writes them anywhere.

`FiniteTraining` raises `TrainingDiverged` at the first optimizer step whose loss is not
finite, and before a validation on non-finite weights; `LastCheckpoint` refuses to write
non-finite weights (`nonfinite_weight`), so `last.ckpt` keeps the last good step (the rule of
`packlm.checkpoint.last`).
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L

from packlm.checkpoint.last import LastFile, TrainingDiverged, nonfinite_weight


class FiniteTraining(L.Callback):
    """Stop at the first step whose loss (summed over all ranks, so every rank agrees) is not
    finite, and before a validation on non-finite weights: without it a diverged run went on
    to its end, wrote NaN weights into last.ckpt and died in the text sampler."""

    def __init__(self, last: LastFile):
        self.last = last
        self._step_seen: int | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._step_seen = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, *args: Any) -> None:
        if trainer.global_step == self._step_seen:
            return  # inside an accumulation cycle: the step's loss is not summed yet
        self._step_seen = trainer.global_step
        loss = float(pl_module.last_loss)
        if not math.isfinite(loss):
            raise TrainingDiverged(trainer.global_step, f"the training loss is {loss}", self.last)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        bad = nonfinite_weight(pl_module)
        if bad is not None:
            what = f"the weight {bad} is not finite (before validation)"
            raise TrainingDiverged(trainer.global_step, what, self.last)
