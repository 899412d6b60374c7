"""Put the tokenizer and the data config into every checkpoint.

A checkpoint then stands alone: `python -m packlm.generate ckpt_path=...` decodes with
the exact tokenizer the model was trained with, and a resume can tell which data it saw.
Everything stored is plain data (ints, bytes, strings), loadable with weights_only=True;
`packlm.checkpoint.contents` reads it back.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from packlm.checkpoint.contents import KEY


class CheckpointExtras(L.Callback):
    def __init__(
        self,
        tokenizer: Any,
        data_config: dict[str, Any],
        settings: dict[str, Any] | None = None,
        cache_dir: str | None = None,
    ):
        self.tokenizer = tokenizer
        self.data_config = data_config
        self.settings = settings or {}  # run settings a resume compares (trainer.max_steps, ...)
        # where the run's stores are: `python -m packlm.trace` finds them there even for a run
        # started from Python, which has no .hydra/config.yaml to say it
        self.cache_dir = cache_dir

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint[KEY] = {
            "tokenizer": self.tokenizer.__getstate__(),
            "data": self.data_config,
            "settings": self.settings,
        }
        if self.cache_dir is not None:
            checkpoint[KEY]["cache_dir"] = self.cache_dir
