"""A Lightning logger that keeps every logged row in memory, for tests that read metrics."""

from __future__ import annotations

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
