"""Stop a run whose loss or weights turn NaN or infinite, before it writes them anywhere.

`FiniteTraining` raises `TrainingDiverged` at the first optimizer step whose loss is not
finite, and before a validation on non-finite weights; `LastCheckpoint` refuses to write
non-finite weights (`nonfinite_weight`), so `last.ckpt` keeps the last good step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import lightning as L
import torch

if TYPE_CHECKING:
    from packlm.callbacks.checkpointing import LastCheckpoint


def nonfinite_weight(module: torch.nn.Module) -> str | None:
    """The name of the first parameter holding a NaN or an infinity, None when all are finite
    (one device sync)."""
    named = list(module.named_parameters())
    if not named:
        return None
    finite = torch.stack([torch.isfinite(p.detach()).all() for _, p in named]).tolist()
    return next((name for (name, _), ok in zip(named, finite, strict=True) if not ok), None)


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN or infinite; last.ckpt holds the last good step."""

    def __init__(self, step: int, what: str, last: LastCheckpoint):
        self.step = step
        kept = (
            f"{last.path} keeps step {last.saved_step}"
            if last.saved_step is not None
            else f"{last.path} was not written by this run"
        )
        super().__init__(
            f"training diverged at step {step}: {what}; {kept}. Try a lower optim.lr, a longer "
            "optim.warmup_steps, trainer.gradient_clip_val=1.0 or trainer.precision=32-true"
        )


class FiniteTraining(L.Callback):
    """Stop at the first step whose loss (summed over all ranks, so every rank agrees) is not
    finite, and before a validation on non-finite weights: without it a diverged run went on
    to its end, wrote NaN weights into last.ckpt and died in the text sampler."""

    def __init__(self, last: LastCheckpoint):
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
