"""The terminal progress bar: Lightning's rich bar, without "Epoch 3/-2".

Lightning's rich bar writes "Epoch {e}/{max_epochs - 1}", which reads "Epoch 3/-2" in a run
without an epoch limit (max_epochs=-1: trainer.max_steps, max_time or a token budget ends
the run, the usual case here). This bar writes "Epoch 3" then and is Lightning's otherwise:
after Lightning's own hooks set the label it rewrites the train task's description through
the public `progress` (rich's `Progress.update`). Without `rich` installed Lightning's tqdm
bar is used as it is (it shows no epoch limit).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar


class EpochProgressBar(RichProgressBar):
    """RichProgressBar whose epoch label drops the limit when there is none."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._drop_epoch_limit(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, *args: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args)  # may create the task (a resume)
        self._drop_epoch_limit(trainer)

    def _drop_epoch_limit(self, trainer: L.Trainer) -> None:
        limit = trainer.max_epochs
        if limit is None or limit >= 0 or self.progress is None:
            return
        if self.train_progress_bar_id is None:
            return
        description = self.train_progress_bar.description
        suffix = f"/{limit - 1}"
        if suffix in description:
            self.progress.update(
                self.train_progress_bar_id, description=description.replace(suffix, "", 1)
            )


def rich_available() -> bool:
    return importlib.util.find_spec("rich") is not None
