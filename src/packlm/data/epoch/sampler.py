"""Epoch plan -> this rank's batches, as document pieces: rank sharding and the resume point.

The sampler runs in the main process and yields, per batch, the document pieces its samples
read (resolved from the plan). Workers therefore hold no epoch state: persistent workers keep
a stale copy of the dataset (pytorch/pytorch#97326), which is harmless here because the
dataset only knows the store. Rank r of w takes positions r, r+w, r+2w... of each global
batch of w*B samples, so all ranks get the same number of batches (a rank short of samples
in the last one gets PAD rows); DataLoader workers take whole batches in turn, so they
split a rank's share without duplicates or gaps for any worker count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
from torch.utils.data import Sampler

from packlm.data.epoch.plan import EpochPlan


class BatchPieces(NamedTuple):
    """One batch as the worker needs it: `rows` rows, made of document pieces."""

    rows: int
    pieces: np.ndarray  # int64 [4, p]: row, store document, start in document, length


class PlanSampler(Sampler):
    """Yields this rank's BatchPieces for the current epoch, from sample `start` of the epoch."""

    def __init__(
        self,
        plan_for: Callable[[int], EpochPlan],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        epoch: int = 0,
        on_epoch: Callable[[int], None] | None = None,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.plan_for = plan_for
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.epoch = epoch
        self.start = 0  # first sample of the next pass (set by a resume, cleared by the loader)
        self.consumed = 0  # samples of this epoch handed to training, all ranks together
        self.on_epoch = on_epoch
        self._plan: EpochPlan | None = None
        self._plan_epoch = -1

    @property
    def plan(self) -> EpochPlan:
        """The current epoch's plan (built once per epoch)."""
        if self._plan is None or self._plan_epoch != self.epoch:
            self._plan, self._plan_epoch = self.plan_for(self.epoch), self.epoch
        return self._plan

    @property
    def step(self) -> int:
        """Samples per global batch (all ranks)."""
        return self.batch_size * self.world_size

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at every epoch start; a new epoch starts at its first sample."""
        if epoch != self.epoch:
            self.epoch, self.start, self.consumed = epoch, 0, 0
        if self.on_epoch is not None:
            self.on_epoch(epoch)

    def resume(self, epoch: int, consumed: int) -> None:
        """Continue `epoch` after `consumed` samples; an older epoch than the current is ignored
        (the run moved past it, e.g. a checkpoint written at the end of that epoch)."""
        if epoch >= self.epoch:
            self.epoch, self.start, self.consumed = epoch, consumed, consumed

    def __len__(self) -> int:
        """Batches of the whole epoch on every rank (also when resuming mid-epoch)."""
        return math.ceil(self.plan.n_samples / self.step)

    def __iter__(self) -> Iterator[BatchPieces]:
        self.consumed = self.start
        return self._batches(self.plan, self.start)

    def _batches(self, plan: EpochPlan, start: int) -> Iterator[BatchPieces]:
        n = plan.n_samples
        mine = self.rank + self.world_size * np.arange(self.batch_size)  # [B] slots of this rank
        for base in range(start, n, self.step):
            positions = base + mine
            ids = plan.sample_ids(positions[positions < n])
            yield BatchPieces(self.batch_size, np.stack(plan.pieces(ids)))
