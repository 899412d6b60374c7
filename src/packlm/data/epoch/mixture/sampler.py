"""The sampler of a mixture: `PlanSampler`'s position, ranks, skips and resume, with each
global batch dealt from the per-source streams (`SourceStreams`) instead of one epoch plan.

The position keeps its meaning: `consumed` counts the epoch's samples handed to training
(all ranks), `batch`/`dropped` its global batches dealt / left out by data.skip_steps. Global
batch G = epoch * (batches of an epoch) + batch of the epoch, so a resume (also under
another rank count with the same global batch) deals exactly the rows an uninterrupted run
deals, and a skipped step's rows are passed over, never re-dealt.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from packlm.data.epoch.curriculum import Position, Segment
from packlm.data.epoch.mixture.streams import SourceStreams
from packlm.data.epoch.sampler import BatchPieces, PlanSampler


class MixtureSampler(PlanSampler):
    """`PlanSampler` over a mixture's `streams` (its B = batch_size * world_size rows)."""

    def __init__(self, streams: SourceStreams, batch_size: int, **kwargs: Any):
        self.streams = streams
        super().__init__(lambda e: None, batch_size, **kwargs)
        if streams.rows != self.step:
            raise ValueError(f"the mixture deals {streams.rows} rows a batch, not {self.step}")

    @property
    def epoch_batches(self) -> int:
        return self.streams.epoch_batches()

    @property
    def plan(self) -> Any:
        """What the loader's resume line reads: the samples of an epoch."""
        return SimpleNamespace(n_samples=self.epoch_batches * self.step)

    def global_batch(self, epoch: int, batch: int) -> int:
        """G: the run's global batch number of an epoch's batch."""
        return epoch * self.epoch_batches + batch

    def segments(self) -> list[Segment]:
        p = self.position
        left = self.epoch_batches - (p.batch + p.dropped)
        return [Segment(0, p.consumed, max(0, left), None)]

    def _batches(self, segments: list[Segment], at: Position) -> Iterator[BatchPieces]:
        mine = self.rank + self.world_size * np.arange(self.batch_size)  # [B] slots of this rank
        for _ in range(segments[0].batches):
            b = at.batch + at.dropped  # the epoch's plan batch
            consumed = (b + 1) * self.step
            if self.skip_steps and self.skip_steps.dropped(at.steps, b):
                at = replace(at, consumed=consumed, dropped=at.dropped + 1)
                continue  # data.skip_steps: passed over, never dealt
            at = replace(at, consumed=consumed, batch=at.batch + 1)
            self.pending.append(at)
            pieces = self.streams.pieces(self.global_batch(at.epoch, b), mine)
            skipped = None
            if self.skip_documents is not None:
                skipped = np.isin(pieces[1], self.skip_documents)  # [p]
                skipped = skipped if skipped.any() else None
            yield BatchPieces(self.batch_size, pieces, None, skipped)


def mixture_line(streams: SourceStreams, accumulate: int = 1) -> str:
    """The log line of a run's mixture: its schedule, and what an epoch is."""
    allocation = streams.allocation
    points = "; ".join(
        f"step {step // accumulate}: "
        + ", ".join(f"{n} {s:g}" for n, s in zip(streams.names, shares, strict=True))
        for step, shares in zip(allocation.steps.tolist(), allocation.shares.tolist(), strict=True)
    )
    how = "linear between points" if allocation.linear else "constant between points"
    return (
        f"data mixture by share ({how}): {points}; an epoch is {streams.epoch_batches():,} "
        f"global batches of {streams.rows} rows"
    )
