"""The terminal progress bar: Lightning's rich bar, without "Epoch 3/-2".

Lightning's rich bar writes "Epoch {e}/{max_epochs - 1}", which reads "Epoch 3/-2" in a run
without an epoch limit (max_epochs=-1: trainer.max_steps, max_time or a token budget ends
the run, the usual case here). This bar writes "Epoch 3" then and is Lightning's otherwise.
Without `rich` installed Lightning's tqdm bar is used as it is (it shows no epoch limit).
"""

from __future__ import annotations

import importlib.util

from lightning.pytorch.callbacks import RichProgressBar


class EpochProgressBar(RichProgressBar):
    """RichProgressBar whose epoch label drops the limit when there is none."""

    def _get_train_description(self, current_epoch: int) -> str:
        description = super()._get_train_description(current_epoch)
        limit = self.trainer.max_epochs
        if limit is not None and limit < 0:
            description = description.replace(f"/{limit - 1}", "", 1)
        return description


def rich_available() -> bool:
    return importlib.util.find_spec("rich") is not None
