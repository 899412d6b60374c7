"""Context-length curriculum (`data.curriculum`): which phase's plan each global batch reads.

A phase is (window, stride, until); its plan of epoch e is the normal plan with that window
and stride. The rule: global batch b (all ranks' samples) belongs to phase p while the
supervised targets of the batches before b (all ranks, counted from the run's start) are
below phase p's `until`; the first batch with the count >= until reads phase p+1. A switch
can come mid-epoch: the epoch then goes on in the new phase's plan of the same epoch, from
the sample at the same fraction of the epoch (position k of n samples -> k * n' // n of n').

Targets are counted from the plan's pieces exactly as collate labels them (document/none
packing: a piece of L tokens gives L-1 targets, data.bos included since the plan's lengths
count the BOS; stream: a row of R tokens gives R-1), vectorised, ahead of time for the rest
of the epoch: so `len()` is exact and a resume from any batch recomputes the same switches.
In a store with conversations (`EpochPlan.chat_mask`) only the targets data.chat_supervised
keeps are counted: their role codes are read from the store, a chunk of at most
`ChatMask.samples_per_chunk` samples at a time (only such stores pay for it). The targets of
data.skip_documents are counted as if trained (the switches stay where they were).
Counting stops in the last phase, which needs no count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from packlm.batch import piece_targets
from packlm.config.data import DataConfig
from packlm.data.epoch.plan import EpochPlan

CHUNK = 1 << 16
"""Samples whose targets are counted at once (bounds the temporaries of `EpochPlan.pieces`)."""


class Phase(NamedTuple):
    window: int
    stride: int
    until: int | None  # supervised tokens (all ranks) that end the phase; None: the last


def phases_of(cfg: DataConfig) -> list[Phase]:
    """The phases of data.curriculum; without one, a single phase of data.window/stride."""
    if not cfg.curriculum:
        return [Phase(cfg.window, cfg.stride, None)]
    return [
        Phase(int(p["window"]), int(p.get("stride", p["window"])), p.get("until"))
        for p in cfg.curriculum
    ]


def phase_config(cfg: DataConfig, phase: Phase) -> DataConfig:
    """The data config whose plan is this phase's: window and stride replaced."""
    return replace(cfg, window=phase.window, stride=phase.stride)


def phase_at(phases: list[Phase], tokens: int) -> int:
    """The phase of a batch before which `tokens` supervised targets were trained."""
    p = 0
    while phases[p].until is not None and tokens >= phases[p].until:
        p += 1
    return p


@dataclass
class Position:
    """Where training is in the data, after the batches handed to training (checkpointed)."""

    epoch: int = 0
    phase: int = 0
    consumed: int = 0  # samples of the phase's plan of this epoch before the next batch
    tokens: int = 0  # supervised targets counted by the curriculum (all ranks)
    batch: int = 0  # global batches of this epoch handed out
    steps: int = 0  # plan steps of the epochs before (data.skip_steps' numbering, packlm.data.skip)
    dropped: int = 0  # global batches of this epoch left out by data.skip_steps

    def set(self, other: Position) -> None:
        """Take other's values in place (the object is shared by the epochs' samplers)."""
        vars(self).update(vars(other))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Segment(NamedTuple):
    """Consecutive global batches of one phase's plan inside one epoch."""

    phase: int
    start: int  # position of its first sample in the phase's plan
    batches: int
    targets: (
        np.ndarray | None
    )  # int64 [batches]: supervised targets per global batch; None: last phase


def sample_targets(plan: EpochPlan, positions: np.ndarray) -> np.ndarray:
    """int64 [n]: supervised targets (`packlm.batch`'s label rule, with the plan's chat mask)
    of the samples at positions."""
    ids = plan.sample_ids(positions)
    row, doc, start, length = plan.pieces(ids)
    mask = plan.chat_mask
    allowed = None if mask is None else mask.allowed(doc, start, length)
    return piece_targets(row, length, len(ids), plan.packing, allowed)


def chunk_samples(plan: EpochPlan) -> int:
    """Samples counted at once: CHUNK, or fewer where the roles of their tokens are read."""
    if plan.chat_mask is None:
        return CHUNK
    return min(CHUNK, plan.chat_mask.samples_per_chunk(plan.window))


def phase_batches(plan: EpochPlan, start: int, step: int, need: int) -> np.ndarray:
    """int64 [b]: the targets of the global batches from `start` that still belong to the phase:
    those before which fewer than `need` targets were counted (all the rest of the epoch, or
    up to the switch)."""
    n, out, counted = plan.n_samples, [], 0
    per_chunk = max(1, chunk_samples(plan) // step)  # global batches (a batch at least)
    for lo in range(start, n, per_chunk * step):
        if counted >= need:
            break
        positions = np.arange(lo, min(n, lo + per_chunk * step))
        batch_sums = np.add.reduceat(
            sample_targets(plan, positions), np.arange(0, len(positions), step)
        )
        before = counted + np.cumsum(batch_sums) - batch_sums  # [b] counted before each batch
        keep = before < need
        out.append(batch_sums[keep])
        counted += int(batch_sums[keep].sum())
        if not keep.all():
            break
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def epoch_segments(
    position: Position, phases: list[Phase], plan_for: Callable[[int, int], EpochPlan], step: int
) -> list[Segment]:
    """The rest of `position.epoch` from `position`: one segment per phase it passes through."""
    phase, start, tokens, out = position.phase, position.consumed, position.tokens, []
    while True:
        plan = plan_for(position.epoch, phase)
        n = plan.n_samples
        left = max(0, -(-(n - start) // step))
        until = phases[phase].until
        if until is None:
            return [*out, Segment(phase, start, left, None)]
        targets = phase_batches(plan, start, step, until - tokens)
        out.append(Segment(phase, start, len(targets), targets))
        tokens += int(targets.sum())
        if tokens < until:  # the epoch ends inside the phase
            return out
        end = min(n, start + len(targets) * step)
        phase += 1
        start = end * plan_for(position.epoch, phase).n_samples // n if n else 0


def expected_tokens(phases: list[Phase], per_batch: list[float], batches: float) -> float:
    """Expected supervised targets after `batches` global batches, phase by phase
    (`per_batch[p]`: expected targets of one global batch of phase p)."""
    tokens, left = 0.0, float(batches)
    for phase, rate in zip(phases, per_batch, strict=True):
        if phase.until is None or rate <= 0:
            return tokens + left * max(rate, 0.0)
        span = (phase.until - tokens) / rate  # batches the phase lasts
        if left <= span:
            return tokens + left * rate
        tokens, left = float(phase.until), left - span
    return tokens


def expected_batches(phases: list[Phase], per_batch: list[float], tokens: float) -> float:
    """The inverse of `expected_tokens`: global batches expected to train `tokens` targets
    (sizes a step horizon from a token budget, train.max_supervised_tokens)."""
    batches, done = 0.0, 0.0
    for phase, rate in zip(phases, per_batch, strict=True):
        end = tokens if phase.until is None else min(tokens, phase.until)
        if end > done:
            batches += (end - done) / max(rate, 1e-12)
            done = end
    return batches
