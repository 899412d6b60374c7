"""Cross-entropy summed by source or by document, from the per-target CE the loss already
computed (`LitCausalLM.last_target_ce`: no second forward).

A source's (or document's) loss is its sum of CE over the supervised targets it owns divided
by the number of those targets, the same kind of ratio as the total loss, so the group
losses weighted by their targets add up to the total exactly. A target belongs to its input
token's source or document (`source_ids`, `document_ids` of `packlm.batch`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from packlm.batch import IGNORE_INDEX

ROWS = 3
"""The rows of the totals: sum of CE (nats), supervised targets, their UTF-8 bytes."""


class GroupTotals:
    """(sum of CE, supervised targets, their bytes) of each of n groups, float64 [3, n] on the
    device, added batch by batch without a host sync."""

    def __init__(self, n: int):
        self.n = n
        self.totals: Tensor | None = None

    def add(
        self, ce: Tensor, labels: Tensor, group: Tensor, byte_lengths: Tensor | None = None
    ) -> None:
        """ce float32 [B, T] (0 where no target), labels [B, T], group [B, T] (-1 on PAD),
        byte_lengths int [V] (None: no bytes counted)."""
        supervised = ((labels != IGNORE_INDEX) & (group >= 0)).flatten()  # [B T]
        slot = group.long().flatten().masked_fill(~supervised, self.n)  # no target -> n
        rows = [ce.detach().flatten().double() * supervised, supervised.double()]
        if byte_lengths is None:
            rows.append(torch.zeros_like(rows[1]))
        else:
            rows.append(byte_lengths[labels.flatten().clamp(min=0)].double() * supervised)
        if self.totals is None:
            self.totals = torch.zeros(ROWS, self.n + 1, dtype=torch.float64, device=ce.device)
        self.totals.index_add_(1, slot, torch.stack(rows))  # [3, n + 1]

    def take(self, reduce=None, device: torch.device | str = "cpu") -> Tensor:
        """float64 [3, n] so far (zeros on `device` if nothing was added), summed over the
        ranks by `reduce` (e.g. the strategy's; every rank calls it), then start again."""
        totals, self.totals = self.totals, None
        if totals is None:
            totals = torch.zeros(ROWS, self.n + 1, dtype=torch.float64, device=device)
        totals = totals[:, : self.n].contiguous()
        return reduce(totals) if reduce is not None else totals


def group_losses(totals: Tensor) -> list[float | None]:
    """Mean CE of each group from float64 [3, n] totals (one host read); None: no target."""
    nats, targets, _ = totals.tolist()
    return [s / t if t > 0 else None for s, t in zip(nats, targets, strict=True)]
