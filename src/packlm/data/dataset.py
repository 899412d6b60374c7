"""Epoch plan + store -> batches: rank sharding, worker-safe reading, resumable position.

The sampler runs in the main process and yields, per batch, the document pieces its samples
read (resolved from the plan). Workers therefore hold no epoch state: persistent workers keep
a stale copy of the dataset (pytorch/pytorch#97326), which is harmless here because the
dataset only knows the store. Rank r of w takes positions r, r+w, r+2w... of each global
batch of w*B samples, so all ranks get the same number of batches (a rank short of samples
in the last one gets PAD rows); DataLoader workers take whole batches in turn, so they
split a rank's share without duplicates or gaps for any worker count.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from torch.utils.data import DataLoader, Dataset, Sampler

from packlm.data.collate import Samples, collate_arrays, to_tensors
from packlm.data.config import ConfigError, DataConfig
from packlm.data.plan import EpochPlan
from packlm.data.store import TokenStore

PLAN_KEYS = (
    "window",
    "stride",
    "random_offset",
    "tail",
    "packing",
    "pack_size",
    "shuffle",
    "shuffle_documents",
    "batch_size",
    "seed",
)


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


class WindowDataset(Dataset):
    """BatchPieces -> Samples, read from the store's memmap (only the tokens the pieces name)."""

    def __init__(self, store_path: str | Path, window: int, pad_id: int):
        self.store_path = Path(store_path)
        self.window = window
        self.pad_id = pad_id
        self._store: TokenStore | None = None

    @property
    def store(self) -> TokenStore:
        if self._store is None:  # opened lazily, once per process
            self._store = TokenStore.open(self.store_path)
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}  # memmaps are reopened, never pickled

    def __getitem__(self, batch: BatchPieces) -> Samples:
        row, doc, start, length = batch.pieces  # [p] each, rows in order
        t1 = self.window + 1
        tokens = np.full((batch.rows, t1), self.pad_id, dtype=np.int64)
        segments = np.full((batch.rows, t1), -1, dtype=np.int32)
        p = len(row)
        if p:
            first = np.ones(p, dtype=bool)
            first[1:] = row[1:] != row[:-1]
            # [p]: index of the first piece of each piece's row
            run = np.maximum.accumulate(np.where(first, np.arange(p), 0))
            segment = np.arange(p) - run
            ends = np.cumsum(length)
            column = ends - length - (ends - length)[run]  # [p] where each piece starts in its row
            piece = np.repeat(np.arange(p), length)  # [n] piece of each token
            within = np.arange(len(piece)) - (ends - length)[piece]
            source = self.store.doc_offsets[doc][piece] + start[piece] + within
            tokens[row[piece], column[piece] + within] = self.store.tokens[source]
            segments[row[piece], column[piece] + within] = segment[piece]
        return Samples(tokens, segments)


class PlanDataLoader(DataLoader):
    """A DataLoader over a PlanSampler; Lightning saves its `state_dict` in checkpoints.

    The state counts the batches this loader handed out (not what workers prefetched), so a
    restored loader continues with exactly the batch that an uninterrupted run would give.
    Workers send numpy arrays (fast to pickle); they become tensors here, without a copy.
    """

    def __init__(
        self,
        dataset: WindowDataset,
        sampler: PlanSampler,
        packing: str,
        fingerprint: dict,
        num_workers: int = 0,
        **kwargs: Any,
    ):
        kwargs.setdefault("persistent_workers", num_workers > 0)
        super().__init__(
            dataset,
            sampler=sampler,
            batch_size=None,
            collate_fn=partial(collate_arrays, packing=packing),
            num_workers=num_workers,
            **kwargs,
        )
        self.fingerprint = fingerprint

    def __iter__(self):
        sampler: PlanSampler = self.sampler
        inner = super().__iter__()  # runs at the first next(), after Lightning's set_epoch
        sampler.start = 0  # the resume point applies to one pass (iter(sampler) may run twice)
        for batch in inner:
            sampler.consumed = min(sampler.plan.n_samples, sampler.consumed + sampler.step)
            yield to_tensors(batch)

    def state_dict(self) -> dict[str, Any]:
        sampler: PlanSampler = self.sampler
        return {
            "epoch": sampler.epoch,
            "consumed": sampler.consumed,
            "world_size": sampler.world_size,
            "fingerprint": self.fingerprint,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_fingerprint(state.get("fingerprint", {}), self.fingerprint)
        saved_world = state.get("world_size", self.sampler.world_size)
        if saved_world != self.sampler.world_size:
            # Lightning restores the epoch's finished batches per rank: with another rank
            # count they stand for another number of samples, and the epoch would end early.
            raise ConfigError(
                f"cannot resume the data position: the checkpoint was written by {saved_world} "
                f"rank(s), this run has {self.sampler.world_size}; resume with "
                f"trainer.devices x trainer.num_nodes = {saved_world}"
            )
        self.sampler.resume(int(state["epoch"]), int(state["consumed"]))


def plan_fingerprint(
    cfg: DataConfig, store: TokenStore, weights: list[float] | None
) -> dict[str, Any]:
    """What decides the plans: the data keys, the mixing weights and the store's identity."""
    identity = json.dumps(store.manifest.get("fingerprint"), sort_keys=True, default=str)
    out: dict[str, Any] = {f"data.{k}": getattr(cfg, k) for k in PLAN_KEYS}
    out["data.sources weights"] = list(weights) if weights else None
    out["store"] = {
        "documents": store.n_docs,
        "tokens": store.n_tokens,
        "fingerprint": hashlib.sha256(identity.encode()).hexdigest()[:16],
    }
    return out


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Raise ConfigError naming every key whose value differs from the checkpoint's."""
    changed = [
        f"{k}: {saved.get(k)!r} in the checkpoint, {current.get(k)!r} now"
        for k in sorted(set(saved) | set(current))
        if saved.get(k) != current.get(k)
    ]
    if changed:
        raise ConfigError(
            "cannot resume the data position: the data config differs from the checkpoint's ("
            + "; ".join(changed)
            + "). Resume with the same data settings, or start a new run."
        )
