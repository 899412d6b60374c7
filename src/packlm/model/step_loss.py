"""`ExactStepLoss`: the loss of an optimizer step = sum of cross-entropy over its supervised
targets / N, N the supervised targets of the whole step (every micro-batch of the
accumulation cycle, every rank), for any LightningModule with automatic optimization.

    class MyLM(ExactStepLoss, L.LightningModule):
        def training_step(self, batch, batch_idx):
            logits = self.model(batch["input_ids"], position_ids=batch["position_ids"]).logits
            return self.step_loss(batch, logits)

`step_loss` returns s * (the micro-batch's sum of CE) and adds the micro-batch's totals to
the cycle's; `on_before_optimizer_step` rescales the gradients to grad(sum CE / N)
(`packlm.model.loss` has the derivation). A mean per micro-batch, Lightning's default, weighs
a token of a short micro-batch more: not exact. A module overriding
`on_before_optimizer_step`, `on_save_checkpoint` or `on_load_checkpoint` calls super().

No host sync in the step: the counts (N among them) come from each batch while it is still
on the CPU (`packlm.batch.with_counts`, which packlm's DataModule applies in its
`on_before_batch_transfer`; apply it in your own DataModule's, or your LightningModule's),
and the sums of CE stay on the device until something reads them: `train/loss` on a logging
step, a progress line. Under DDP, or for a batch that reached the module without its counts,
the cycle's totals are all-reduced on the device and read back once a step (Lightning 2.6
itself reads a flag from the device every step under DDP).

After each step: `last_step` (`StepTotals`), `last_loss`, `last_grad_norm` (before
clipping) and the cumulative `tokens_seen` (input, nonpad, supervised, documents; all ranks,
checkpointed), which `packlm.callbacks.StepMetrics` logs; after each batch
`last_target_ce`, its CE per target, which `packlm.callbacks.SourceLosses` sums by source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from packlm.batch import COUNTED, COUNTS_KEY, IGNORE_INDEX
from packlm.model.loss import (
    COUNTS,
    StepTotals,
    cross_entropy_per_target,
    grad_norm,
    micro_batch_totals,
    scale_to_step_mean,
)

CHECKPOINT_KEY = "packlm_tokens_seen"
_TARGET_DOCUMENTS = COUNTED.index("target_documents")


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
        # loss of the last optimizer step (logged as train/loss): a device scalar until read
        self.last_loss: Tensor | float = 0.0
        self.last_grad_norm: Tensor | float = 0.0  # of the last step, before clipping
        # the accumulation cycle so far: device [2] sums of CE (nats, document nats) and host
        # counts (`COUNTED`) of the batches that brought them; device [9] StepTotals of those
        # that did not (or under DDP)
        self._cycle_nats: Tensor | None = None
        self._cycle_counts: np.ndarray | None = None
        self._cycle: Tensor | None = None
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
        doc_nats = None if target_documents is None else objective
        counts = batch.get(COUNTS_KEY)
        trainer = getattr(self, "_trainer", None)
        if counts is not None and (trainer is None or trainer.world_size == 1):
            doc = torch.zeros_like(sum_ce) if doc_nats is None else doc_nats
            nats = torch.stack([sum_ce.detach(), doc.detach()]).double()  # [2], on the device
            if doc_nats is None:  # token weighting: P is counted as 0, as on the device
                counts = counts.copy()
                counts[_TARGET_DOCUMENTS] = 0.0
            cycle = self._cycle_counts
            self._cycle_counts = counts if cycle is None else cycle + counts
            self._cycle_nats = nats if self._cycle_nats is None else self._cycle_nats + nats
        else:
            supervised = batch["labels"] != IGNORE_INDEX
            totals = micro_batch_totals(batch, sum_ce, supervised, doc_nats, target_documents)
            self._cycle = totals if self._cycle is None else self._cycle + totals
        return sum_ce if objective is None else objective

    def _step_totals(self) -> StepTotals | None:
        """The cycle's totals (all ranks), and a fresh cycle; None when nothing was recorded."""
        nats, counts, device_totals = self._cycle_nats, self._cycle_counts, self._cycle
        self._cycle_nats = self._cycle_counts = self._cycle = None
        if device_totals is None:
            return None if counts is None else StepTotals.from_parts(nats, counts)
        if counts is not None:  # some batches brought their counts, some did not
            device_totals = device_totals + StepTotals.vector(nats, counts).to(device_totals)
        return StepTotals.from_tensor(self.trainer.strategy.reduce(device_totals, reduce_op="sum"))

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """End of the accumulation cycle: reduce the totals, rescale to sum CE / N."""
        trainer = self.trainer
        step = self._step_totals()
        if step is None:  # no micro-batch recorded: nothing this mixin may rescale
            return
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
