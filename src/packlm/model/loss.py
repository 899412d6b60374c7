"""The loss: sum of cross-entropy over supervised targets / N, N = the supervised targets of
the whole optimizer step (every micro-batch of the accumulation cycle, every rank).

N is known only when the cycle is over, so automatic optimization is kept and the
weighting is fixed afterwards, exactly:

1. Each micro-batch returns s * (its sum of CE), s = 1 / context_length a constant that only
   keeps fp16 gradients in range. Lightning divides it by A = accumulate_grad_batches, DDP
   averages gradients over W ranks, so after the cycle's last backward

       grad = s / (A W) * sum over micro-batches and ranks of grad(sum of CE).

2. Before the optimizer step the cycle's `StepTotals` are all-reduced in one call and every
   gradient is multiplied by A W / (s N) (`scale_to_step_mean`):  grad = grad(sum CE / N).
   This holds whatever the number of targets of each micro-batch and rank, and for a short
   last cycle of an epoch (Lightning divides by A there too).
3. Lightning clips (`gradient_clip_val`), AdamW steps, the schedule steps.

A step with N = 0 has loss 0: its gradients are dropped, so AdamW skips every parameter.

`model.loss_weighting=document` makes every document of the step weigh the same whatever its
length: each target's CE is weighted by 1 / (targets of its document piece), a piece being a
(row, segment) pair, and N becomes P, the pieces with a target in the whole step (all
micro-batches, ranks); steps 1-3 are unchanged, so it is exact in the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from packlm.batch import COUNTED, IGNORE_INDEX
from packlm.model import fused
from packlm.runtime.shims import foreach_mul_, foreach_norm

COUNTS = ("input", "nonpad", "supervised", "documents")
"""The token counts of DESIGN.md "The batch", in the order they are logged."""


@dataclass(frozen=True)
class StepTotals:
    """What one optimizer step adds up to, over all its micro-batches and ranks. The counts
    are floats; `nats` and `document_nats` may be device scalars, read only by whoever needs
    their value (a logging step), so the step itself never waits for the device."""

    nats: float | Tensor = 0.0
    """Sum of cross-entropy over the supervised targets."""
    supervised: float = 0.0
    """N: targets != -100 (the loss denominator)."""
    input: float = 0.0
    """B * T positions."""
    nonpad: float = 0.0
    """Positions with segment_ids >= 0."""
    documents: float = 0.0
    """Distinct (row, segment) pairs with segment >= 0."""
    document_nats: float | Tensor = 0.0
    """Sum over document pieces with a target of their mean cross-entropy."""
    target_documents: float = 0.0
    """P: document pieces with at least one target (the denominator of document weighting)."""
    attention_pairs: float = 0.0
    """(query, key) pairs the block-diagonal causal mask allows (non-PAD queries)."""
    dense_pairs: float = 0.0
    """(query, key) pairs of a dense T x T causal mask over the same rows: B T (T+1) / 2."""

    @property
    def loss(self) -> float | Tensor:
        """Mean cross-entropy per supervised target (0 when there is none)."""
        return self.nats / self.supervised if self.supervised > 0 else 0.0

    @property
    def loss_per_document(self) -> float | Tensor:
        """Mean over document pieces of their mean cross-entropy (0 when there is none)."""
        return self.document_nats / self.target_documents if self.target_documents > 0 else 0.0

    def counts(self) -> dict[str, int]:
        return {k: int(getattr(self, k)) for k in COUNTS}

    @property
    def attention_useful_fraction(self) -> float:
        """How much of dense causal attention the packed batch needs (1 without packing)."""
        return self.attention_pairs / self.dense_pairs if self.dense_pairs > 0 else 0.0

    @classmethod
    def from_tensor(cls, totals: Tensor) -> StepTotals:
        """From the float64 device vector of `micro_batch_totals` (reads it: one sync)."""
        return cls(*totals.tolist())

    @classmethod
    def from_parts(cls, nats: Tensor, counts: np.ndarray) -> StepTotals:
        """From the device [2] (nats, document_nats) and the host counts (`packlm.batch.COUNTED`
        order): nothing is read from the device."""
        host = dict(zip(COUNTED, counts.tolist(), strict=True))
        return cls(nats=nats[0], document_nats=nats[1], **host)

    @staticmethod
    def vector(nats: Tensor, counts: np.ndarray) -> Tensor:
        """The float64 [9] vector of `micro_batch_totals` from `from_parts`' parts, on nats'
        device (for an all-reduce)."""
        host = dict(zip(COUNTED, torch.from_numpy(counts).to(nats.device), strict=True))
        values = {"nats": nats[0], "document_nats": nats[1], **host}
        return torch.stack([values[f.name] for f in fields(StepTotals)])


def cross_entropy_per_target(logits: Tensor, labels: Tensor) -> Tensor:
    """float32 [B, T] CE of each position, 0 where there is no target."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    ce = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return ce.view(labels.shape)


def head_cross_entropy(
    model,
    logits_of,
    inputs: tuple,
    labels: Tensor,
    weights: Tensor | None = None,
    hidden_of: Callable[..., Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """(sum over the supervised targets of weight * CE, differentiable; float32 [B, T] CE,
    0 where there is no target). weights [B, T], None: 1 per target.

    `model` is the Transformer, `inputs` its (input_ids, segment_ids, position_ids). On CPU
    with at least fused.CE_CHUNKED_FROM logits the head and the CE run in row chunks
    (fused.linear_cross_entropy: no [B, T, V] logits held) on `hidden_of(*inputs)` (default
    model.hidden; a compiled run's compiled trunk); otherwise (an accelerator, small logits)
    `logits_of(*inputs)` gives the logits for F.cross_entropy.
    """
    V = model.lm_head.weight.shape[0]
    chunked = labels.numel() * V >= fused.CE_CHUNKED_FROM and labels.device.type == "cpu"
    if not chunked:
        ce = cross_entropy_per_target(logits_of(*inputs), labels)  # [B, T]
        return (ce.sum() if weights is None else (ce * weights).sum()), ce
    objective, ce = fused.linear_cross_entropy(
        (hidden_of or model.hidden)(*inputs).flatten(0, 1),  # [B T, C]
        model.lm_head.weight,
        labels.flatten(),
        None if weights is None else weights.flatten(),
        IGNORE_INDEX,
        model.config.logit_softcap,
    )
    return objective, ce.view(labels.shape)


def document_weights(
    labels: Tensor, segment_ids: Tensor | None, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    """(float [B, T] weight 1 / (targets of its (row, segment) piece) of each target, 0 elsewhere;
    P, the pieces with a target, a float64 device scalar). No sync with the host."""
    B, T = labels.shape
    supervised = labels != IGNORE_INDEX  # [B, T]
    seg = torch.zeros_like(labels) if segment_ids is None else segment_ids.long()
    slot = torch.where(supervised & (seg >= 0), seg, T)  # [B, T]; no target -> column T
    counts = torch.zeros(B, T + 1, dtype=dtype, device=labels.device)
    counts.scatter_add_(1, slot, supervised.to(dtype))
    per_target = counts.gather(1, slot)  # [B, T] targets of each position's piece
    weights = torch.where(supervised, 1.0 / per_target.clamp(min=1.0), 0.0)
    return weights, (counts[:, :T] > 0).sum().double()


def token_counts(batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """(input, nonpad, documents) of a batch as float64 device scalars (DESIGN "The batch").

    documents = distinct (row, segment) pairs with segment >= 0; segment ids are < T
    (document index inside the row), so one scatter into [B, T + 1] counts them without
    reading anything back from the device.
    """
    input_ids = batch["input_ids"]
    B, T = input_ids.shape
    device = input_ids.device
    n_input = torch.full((), B * T, dtype=torch.float64, device=device)
    seg = batch.get("segment_ids")
    if seg is None:  # one document per row, no PAD
        return n_input, n_input.clone(), torch.full((), B, dtype=torch.float64, device=device)
    n_nonpad = (seg >= 0).sum().double()
    present = torch.zeros(B, T + 1, dtype=torch.bool, device=device)
    present.scatter_(1, torch.where(seg >= 0, seg, T).long(), True)  # PAD -> column T
    return n_input, n_nonpad, present[:, :T].sum().double()


def attention_pairs(batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
    """(allowed, dense) causal (query, key) pairs of a batch, float64 device scalars: a
    document piece of n tokens allows n (n+1) / 2 pairs; a dense causal row T (T+1) / 2."""
    input_ids = batch["input_ids"]
    B, T = input_ids.shape
    dense = torch.full((), B * T * (T + 1) / 2, dtype=torch.float64, device=input_ids.device)
    seg = batch.get("segment_ids")
    if seg is None:
        return dense, dense.clone()
    sizes = torch.zeros(B, T + 1, dtype=torch.float64, device=input_ids.device)
    sizes.scatter_add_(1, torch.where(seg >= 0, seg, T).long(), torch.ones_like(sizes[:, :T]))
    n = sizes[:, :T]  # [B, T] tokens of each (row, segment) piece
    return (n * (n + 1) / 2).sum(), dense


def micro_batch_totals(
    batch: Mapping[str, Tensor],
    sum_ce: Tensor,
    supervised: Tensor,
    document_nats: Tensor | None = None,
    target_documents: Tensor | None = None,
) -> Tensor:
    """float64 [9] in `StepTotals` field order, on the batch's device (no sync)."""
    n_input, n_nonpad, n_docs = token_counts(batch)
    allowed, dense = attention_pairs(batch)
    zero = torch.zeros((), dtype=torch.float64, device=n_input.device)
    values = {
        "nats": sum_ce.detach().double(),
        "supervised": supervised.sum().double(),
        "input": n_input,
        "nonpad": n_nonpad,
        "documents": n_docs,
        "document_nats": zero if document_nats is None else document_nats.detach().double(),
        "target_documents": zero if target_documents is None else target_documents,
        "attention_pairs": allowed,
        "dense_pairs": dense,
    }
    return torch.stack([values[f.name] for f in fields(StepTotals)])


def scale_to_step_mean(
    grads: list[Tensor], denominator: float, accumulate: int, world_size: int, loss_scale: float
) -> None:
    """Step 2 of the module doc: grad(s/(A W) * sum CE) -> grad(sum CE / N), in place.

    `denominator` is N, the supervised targets of the whole step (all micro-batches, ranks),
    or P, its document pieces with a target, under document weighting.
    """
    foreach_mul_(grads, accumulate * world_size / (loss_scale * denominator))


def grad_norm(grads: list[Tensor]) -> Tensor:
    """L2 norm of all gradients together, a device scalar (0 without gradients)."""
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(foreach_norm(grads)))
