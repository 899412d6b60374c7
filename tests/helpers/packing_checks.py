"""Invariants 6 and 7 (ranks x workers exactly once, exact resume) for any way of building
plans, over a position store (token id = store position, so a row names its sample)."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np

from helpers.plans import loader_over
from packlm.data.epoch.loader import PlanDataLoader
from packlm.data.epoch.sampler import PlanSampler


def plan_loader(store, cfg, build, rank=0, world=1, workers=0, epoch=0) -> PlanDataLoader:
    """A loader over `build(epoch) -> EpochPlan` for rank `rank` of `world`."""
    sampler = PlanSampler(build, cfg.batch_size, rank, world, epoch)
    return loader_over(store, cfg, sampler, workers)


def rows(batches, pad_id) -> list[tuple[int, int]]:
    """(first token, real tokens) of every non-padding row."""
    out = []
    for b in batches:
        for r in b["input_ids"].numpy():
            real = r != pad_id
            if real.any():
                out.append((int(r[0]), int(real.sum())))
    return out


def check_ranks_and_workers_exactly_once(store, cfg, build, workers=2, world=2, epoch=0):
    plan = build(epoch)
    _, g, r = plan.windows(np.arange(plan.n_samples))
    offsets = np.asarray(store.doc_offsets)
    stream_to_store = np.concatenate(
        [np.zeros(0, np.int64)] + [np.arange(offsets[d], offsets[d + 1]) for d in plan.order]
    )
    firsts, reads = stream_to_store[g].tolist(), np.minimum(r, cfg.window).tolist()
    planned = Counter(zip(firsts, reads, strict=True))
    seen, counts = Counter(), set()
    for rank in range(world):
        batches = list(plan_loader(store, cfg, build, rank, world, workers, epoch))
        counts.add(len(batches))
        seen.update(rows(batches, store.pad_id))
    assert counts == {-(-plan.n_samples // (world * cfg.batch_size))}
    assert seen == planned


def check_exact_resume(store, cfg, build, stop=5, epoch=1):
    full = [b["input_ids"] for b in plan_loader(store, cfg, build, workers=2, epoch=epoch)]
    first = plan_loader(store, cfg, build, workers=2, epoch=epoch)
    it = iter(first)
    for _ in range(stop):
        next(it)
    state = pickle.loads(pickle.dumps(first.state_dict()))
    fresh = plan_loader(store, cfg, build, workers=2, epoch=0)
    fresh.load_state_dict(state)
    rest = [b["input_ids"] for b in fresh]
    assert len(rest) == len(full) - stop
    assert all((a == b).all() for a, b in zip(rest, full[stop:], strict=True))
