"""`ExactStepLoss`: the loss of an optimizer step = sum of cross-entropy over its supervised
targets / N, N the supervised targets of the whole step (every micro-batch of the
accumulation cycle, every rank), for any LightningModule with automatic optimization.

    class MyLM(ExactStepLoss, L.LightningModule):
        def training_step(self, batch, batch_idx):
            logits = self.model(batch["input_ids"], position_ids=batch["position_ids"]).logits
            return self.step_loss(batch, logits)

`step_loss` returns s * (the micro-batch's sum of CE) and adds the micro-batch's totals to
the cycle's, on the device; `on_before_optimizer_step` all-reduces them once and rescales the
gradients to grad(sum CE / N) (`packlm.model.loss` has the derivation). A mean per
micro-batch, Lightning's default, weighs a token of a short micro-batch more: not exact.
A module overriding `on_before_optimizer_step`, `on_save_checkpoint` or
`on_load_checkpoint` calls super().

After each step: `last_step` (`StepTotals`), `last_loss`, `last_grad_norm` (before
clipping) and the cumulative `tokens_seen` (input, nonpad, supervised, documents; all ranks,
checkpointed), which `packlm.callbacks.StepMetrics` logs; after each batch
`last_target_ce`, its CE per target, which `packlm.callbacks.SourceLosses` sums by source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from packlm.batch import IGNORE_INDEX
from packlm.model.loss import (
    COUNTS,
    StepTotals,
    cross_entropy_per_target,
    grad_norm,
    micro_batch_totals,
    scale_to_step_mean,
)

CHECKPOINT_KEY = "packlm_tokens_seen"


class ExactStepLoss:
    """Mixin for a LightningModule (put it first in the bases); see the module doc."""

    loss_scale: float = 1.0
    """s: each micro-batch returns s * its sum of CE (a constant keeping fp16 gradients in
    range, e.g. 1 / context length); undone exactly by the rescale."""
    loss_weighting: str = "token"
    """token: the denominator is N, the supervised targets; document: P, the document pieces
    with a target (the micro-batch's objective is then its document-weighted sum)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tokens_seen = dict.fromkeys(COUNTS, 0)  # cumulative, all ranks, in checkpoints
        self.last_step: StepTotals | None = None  # totals of the last optimizer step
        self.last_loss = 0.0  # loss of the last optimizer step (logged as train/loss)
        self.last_grad_norm: Tensor | float = 0.0  # of the last step, before clipping
        self._cycle: Tensor | None = None  # StepTotals of the accumulation cycle so far
        # float32 [B, T] CE of the last batch (0 where no target), detached: the losses by
        # source and by document read it (`packlm.callbacks.SourceLosses`), no second forward
        self.last_target_ce: Tensor | None = None

    @property
    def supervised_tokens_seen(self) -> int:
        """Supervised targets of all completed optimizer steps, all ranks (budget callbacks)."""
        return self.tokens_seen["supervised"]

    def step_loss(self, batch: Mapping[str, Tensor], logits: Tensor) -> Tensor:
        """The value for `training_step` to return, from [B, T, V] logits of a packlm batch
        (its labels are already shifted: position j's target is labels[:, j])."""
        ce = cross_entropy_per_target(logits, batch["labels"])  # [B, T]
        self.last_target_ce = ce.detach()
        return self.record_micro_batch(batch, ce.sum()) * self.loss_scale

    def record_micro_batch(
        self,
        batch: Mapping[str, Tensor],
        sum_ce: Tensor,
        objective: Tensor | None = None,
        target_documents: Tensor | None = None,
    ) -> Tensor:
        """Add one micro-batch to the cycle; returns its objective (default: `sum_ce`), which
        `training_step` returns times `loss_scale`. Document weighting passes the weighted
        sum as `objective` and P of the micro-batch as `target_documents`."""
        supervised = batch["labels"] != IGNORE_INDEX
        doc_nats = None if target_documents is None else objective
        totals = micro_batch_totals(batch, sum_ce, supervised, doc_nats, target_documents)
        self._cycle = totals if self._cycle is None else self._cycle + totals
        return sum_ce if objective is None else objective

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """End of the accumulation cycle: reduce the totals, rescale to sum CE / N."""
        trainer = self.trainer
        if self._cycle is None:  # no micro-batch recorded: nothing this mixin may rescale
            return
        step = StepTotals.from_tensor(trainer.strategy.reduce(self._cycle, reduce_op="sum"))
        self._cycle = None
        params = [p for group in optimizer.param_groups for p in group["params"]]
        grads = [p.grad for p in params if p.grad is not None]
        by_document = self.loss_weighting == "document"
        denominator = step.target_documents if by_document else step.supervised
        if denominator > 0:
            scale_to_step_mean(
                grads, denominator, trainer.accumulate_grad_batches, trainer.world_size,
                self.loss_scale,
            )  # fmt: skip
        else:  # nothing to learn from: AdamW skips parameters without gradient
            for p in params:
                p.grad = None
            grads = []
        self.last_step = step
        self.last_loss = step.loss_per_document if by_document else step.loss
        self.last_grad_norm = grad_norm(grads)
        for key, n in step.counts().items():
            self.tokens_seen[key] += n

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[CHECKPOINT_KEY] = dict(self.tokens_seen)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self.tokens_seen.update(checkpoint.get(CHECKPOINT_KEY, {}))
