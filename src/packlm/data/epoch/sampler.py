"""Epoch plan -> this rank's batches, as document pieces: rank sharding, curriculum phases,
and the resume point.

The sampler runs in the main process and yields, per batch, the document pieces its samples
read (resolved from the plan). Workers therefore hold no epoch state: persistent workers keep
a stale copy of the dataset (pytorch/pytorch#97326), which is harmless here because the
dataset only knows the store. Rank r of w takes positions r, r+w, r+2w... of each global
batch of w*B samples, so all ranks get the same number of batches (a rank short of samples
in the last one gets PAD rows); DataLoader workers take whole batches in turn, so they
split a rank's share without duplicates or gaps for any worker count. The position is global
(samples consumed by all ranks), so a resume under another rank count or per-rank batch deals
the rest of the order from `consumed` on by the same rule (`PlanDataLoader.load_state_dict`).

With data.curriculum the epoch is a list of segments, one per phase it passes through
(`packlm.data.epoch.curriculum`); every rank computes the same switches from the global
batches' targets, so all switch at the same batch.

data.skip_steps and data.skip_documents (`packlm.data.skip`) change no plan: the global
batches of a skipped step are passed over (their samples and curriculum targets counted as
if dealt), and the pieces of a skipped document are marked for the label mask.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import NamedTuple

import numpy as np
from torch.utils.data import Sampler

from packlm.data.epoch.curriculum import Phase, Position, Segment, epoch_segments
from packlm.data.epoch.plan import EpochPlan
from packlm.data.skip import StepSkips


class BatchPieces(NamedTuple):
    """One batch as the worker needs it: `rows` rows, made of document pieces."""

    rows: int
    pieces: np.ndarray  # int64 [4, p]: row, store document, start in document, length
    window: int | None = None  # the phase's window (None: the dataset's)
    skipped: np.ndarray | None = None  # bool [p]: a data.skip_documents piece; None: none


class PlanSampler(Sampler):
    """Yields this rank's BatchPieces for the current epoch, from `position` on.

    `plan_for(epoch)` gives the plan; with `phases` (a curriculum) `plan_for(epoch, phase)`.
    `position` (shared by the samplers of successive epochs, so the curriculum's phase and
    count carry over) is where training is; it moves when the loader hands a batch out.
    `skip_documents` (int64 sorted store documents) and `skip_steps`: what is not trained
    (`packlm.data.skip`); `skip_steps.accumulate` also numbers the plan steps of the epochs.
    """

    def __init__(
        self,
        plan_for: Callable[..., EpochPlan],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        epoch: int = 0,
        on_epoch: Callable[[int], None] | None = None,
        phases: list[Phase] | None = None,
        position: Position | None = None,
        skip_documents: np.ndarray | None = None,
        skip_steps: StepSkips | None = None,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.phases = phases
        self.plan_for = plan_for if phases else (lambda e, p: plan_for(e))
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.on_epoch = on_epoch
        self.position = position if position is not None else Position()
        self.skip_documents = (
            skip_documents if skip_documents is not None and len(skip_documents) else None
        )
        self.skip_steps = skip_steps if skip_steps is not None else StepSkips()
        self.pending: deque[Position] = deque()  # positions after the batches yielded, in order
        self._segments: tuple[tuple[int, ...], list[Segment]] | None = None
        self._epoch_start = Position(**self.position.as_dict())  # where a new pass starts
        self._resumed = False  # a resume point applies to the next pass only
        self._move_to(epoch)

    @property
    def epoch(self) -> int:
        return self.position.epoch

    @property
    def consumed(self) -> int:
        """Samples of the current phase's plan of this epoch handed to training (all ranks)."""
        return self.position.consumed

    @property
    def plan(self) -> EpochPlan:
        """The plan the next batch reads (the current phase's, built once per epoch)."""
        return self.plan_for(self.position.epoch, self.position.phase)

    @property
    def step(self) -> int:
        """Samples per global batch (all ranks)."""
        return self.batch_size * self.world_size

    def _move_to(self, epoch: int) -> None:
        """A new epoch starts at its first sample, in the phase and count reached so far."""
        p = self.position
        if epoch != p.epoch:
            batches = p.batch + p.dropped + sum(s.batches for s in self.segments())
            steps = p.steps + -(-batches // self.skip_steps.accumulate)  # the epoch's plan steps
            p.set(Position(epoch, p.phase, 0, p.tokens, 0, steps, 0))
            self._epoch_start = Position(**p.as_dict())

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at every epoch start."""
        self._move_to(epoch)
        if self.on_epoch is not None:
            self.on_epoch(epoch)

    def resume(self, position: Position) -> None:
        """Continue from a saved position; an older epoch than the current is ignored (the run
        moved past it, e.g. a checkpoint written at the end of that epoch)."""
        if position.epoch >= self.position.epoch:
            self.position.set(position)
            # a pass after this one restarts the epoch (mid-epoch under a curriculum: this point)
            start = position if self.phases else Position(position.epoch)
            self._epoch_start, self._resumed = Position(**start.as_dict()), True

    def begin_pass(self) -> None:
        """Where a pass over the loader starts: a resume point once, else the epoch's start
        (validation runs the same epoch many times)."""
        if not self._resumed:
            self.position.set(self._epoch_start)
        self._resumed = False

    def segments(self) -> list[Segment]:
        """The rest of the epoch from the position (cached for one position)."""
        p = self.position
        key = (p.epoch, p.phase, p.consumed, p.tokens)
        if self._segments is None or self._segments[0] != key:
            phases = self.phases or [Phase(0, 0, None)]
            self._segments = key, epoch_segments(p, phases, self.plan_for, self.step)
        return self._segments[1]

    def __len__(self) -> int:
        """Batches of the whole epoch on every rank (also when resuming mid-epoch: Lightning
        restores the finished ones as its batch count)."""
        p, left = self.position, sum(s.batches for s in self.segments())
        first = p.batch + p.dropped  # the plan global batch of the epoch the position is at
        left -= self.skip_steps.count(p.steps, first, first + left) if self.skip_steps else 0
        return p.batch + left

    def __iter__(self) -> Iterator[BatchPieces]:
        self.pending.clear()
        return self._batches(self.segments(), Position(**self.position.as_dict()))

    def _batches(self, segments: list[Segment], at: Position) -> Iterator[BatchPieces]:
        for seg in segments:
            plan = self.plan_for(at.epoch, seg.phase)
            n, window = plan.n_samples, self.phases[seg.phase].window if self.phases else None
            # a batch larger than the plan: its samples, no rows that could only be PAD
            rows = min(self.batch_size, -(-n // self.world_size))
            mine = self.rank + self.world_size * np.arange(rows)  # [rows] slots of this rank
            for j in range(seg.batches):
                base = seg.start + j * self.step
                positions = base + mine
                ids = plan.sample_ids(positions[positions < n])
                tokens = at.tokens + (int(seg.targets[j]) if seg.targets is not None else 0)
                consumed = min(n, base + self.step)
                if self.skip_steps and self.skip_steps.dropped(at.steps, at.batch + at.dropped):
                    at = replace(
                        at,
                        phase=seg.phase,
                        consumed=consumed,
                        tokens=tokens,
                        dropped=at.dropped + 1,
                    )
                    continue  # data.skip_steps: passed over, never dealt
                at = replace(
                    at, phase=seg.phase, consumed=consumed, tokens=tokens, batch=at.batch + 1
                )
                self.pending.append(at)
                pieces = np.stack(plan.pieces(ids))
                skipped = None
                if self.skip_documents is not None:
                    skipped = np.isin(pieces[1], self.skip_documents)  # [p]
                    skipped = skipped if skipped.any() else None
                yield BatchPieces(rows, pieces, window, skipped)
