"""Stand-ins for the Lightning pieces a data test needs: a logger that keeps every row, a
module that records each training batch (its weight never moves), a one-shot checkpoint."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.loggers import Logger


class Capture(Logger):
    name, version = "capture", 0

    def __init__(self):
        super().__init__()
        self.rows = []  # (step, {tag: value}) as log_metrics got them
        self.hparams = None

    def log_metrics(self, metrics, step=None):
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params, *args, **kwargs):
        self.hparams = params

    def merged(self) -> dict:
        """Every tag's last logged value."""
        return {k: v for _, m in self.rows for k, v in m.items()}


class Recorder(L.LightningModule):
    """Records every training batch with the step it trains; its weight never moves."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[tuple[int, torch.Tensor]] = []  # (global_step, input_ids)

    def training_step(self, batch, batch_idx):
        self.seen.append((self.trainer.global_step, batch["input_ids"].clone()))
        return (self.w * batch["input_ids"].float().mean()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class SaveAt(L.Callback):
    """Save a checkpoint at the end of optimizer step `step` (once: the first micro-batch's)."""

    def __init__(self, step: int, path):
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step and not self.path.exists():
            trainer.save_checkpoint(self.path)


class StopAfter(L.Callback):
    """Stops training once global_step reaches `step` (a run cut short, to resume)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            trainer.should_stop = True
