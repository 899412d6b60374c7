"""Stop training after a number of supervised targets, so runs compare at equal data.

Stride and window change how many targets a batch holds (overlap, padding, tails), so a
step budget gives different runs different amounts of learning signal; this one doesn't.
"""

from __future__ import annotations

import logging

import lightning as L

log = logging.getLogger(__name__)


class SupervisedTokenBudget(L.Callback):
    def __init__(self, max_supervised_tokens: int):
        if max_supervised_tokens <= 0:
            raise ValueError(
                f"train.max_supervised_tokens={max_supervised_tokens}: must be positive"
            )
        self.max_supervised_tokens = int(max_supervised_tokens)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args) -> None:
        # The count is summed over ranks inside the module, so every rank stops at the same step.
        if (
            pl_module.supervised_tokens_seen >= self.max_supervised_tokens
            and not trainer.should_stop
        ):
            trainer.should_stop = True
            if trainer.is_global_zero:
                log.info(
                    "train.max_supervised_tokens=%d reached at step %d (%d supervised tokens): "
                    "the run ends on its token budget",
                    self.max_supervised_tokens, trainer.global_step, pl_module.supervised_tokens_seen,
                )  # fmt: skip
