"""The last-file rule: `<run>/checkpoints/last.ckpt` holds the run's last good step.

It is rewritten every `train.checkpoint_every_n_steps` steps and at the end, and never with
weights that are not all finite: a run whose loss or weights turn NaN stops with
`TrainingDiverged`, saying which step the file still holds. The writer
(`callbacks/checkpointing.py`) and the guard (`callbacks/finite_training.py`) both follow it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch

LAST = "last.ckpt"


class LastFile(Protocol):
    """What the rule needs to know of the writer: where last.ckpt is, and its step."""

    @property
    def path(self) -> Path: ...

    @property
    def saved_step(self) -> int | None: ...


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

    def __init__(self, step: int, what: str, last: LastFile):
        self.step = step
        kept = (
            f"{last.path} keeps step {last.saved_step}"
            if last.saved_step is not None
            else f"{last.path} was not written by this run"
        )
        super().__init__(
            f"training diverged at step {step}: {what}; {kept}. Try a lower optim.lr (and "
            "optim.muon_lr under optim=muon), a longer "
            "optim.warmup_steps, trainer.gradient_clip_val=1.0 or trainer.precision=32-true"
        )
