"""Elastic resume (issue #37): another rank count, per-rank batch or worker count continues
at the saved global position, and the epoch still trains each of its samples exactly once."""

from __future__ import annotations

import logging
import pickle
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from helpers.plans import config, loader_over, write_position_store
from packlm.data.epoch.loader import PLAN_KEYS
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import PlanSampler

LENGTHS = np.random.default_rng(1).integers(1, 50, size=120)
CFG = config(window=16, stride=8, random_offset=True, shuffle=True, shuffle_documents=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_position_store(tmp_path_factory.mktemp("s") / "store", LENGTHS)


def loaders(store, world, batch, workers=0, epoch=1):
    """One PlanDataLoader per rank of `world`, as DDP builds them, over the same plans."""
    cfg, lengths = replace(CFG, batch_size=batch), np.diff(store.doc_offsets)
    return [
        loader_over(
            store,
            cfg,
            PlanSampler(lambda e: build_plan(lengths, cfg, e), batch, rank, world, epoch),
            workers,
        )
        for rank in range(world)
    ]


def rows(batch, pad_id):
    """(first token, real tokens) of each non-padding row: the store's token at p is p, so
    this names the sample."""
    ids = batch["input_ids"].numpy()
    real = ids != pad_id
    keep = real.any(axis=1)
    return list(zip(ids[keep, 0].tolist(), real[keep].sum(axis=1).tolist(), strict=True))


def epoch_rows(dls, pad_id, stop=None):
    """Samples of the batches each rank takes (the first `stop`, or all); batches per rank."""
    seen, counts = Counter(), []
    for dl in dls:
        it, n = iter(dl), 0
        for batch in it if stop is None else (next(it) for _ in range(stop)):
            seen.update(rows(batch, pad_id))
            n += 1
        counts.append(n)
    return seen, counts


# (ranks, per-rank batch, workers) before -> after
CHANGES = [
    ((2, 8, 0), (3, 8, 0)),
    ((3, 4, 0), (1, 4, 0)),
    ((1, 6, 0), (2, 6, 2)),
    ((2, 4, 0), (1, 8, 0)),  # the same global batch
    ((1, 8, 0), (2, 3, 0)),  # another global batch
]


@pytest.mark.parametrize("at_end", [False, True], ids=["mid-epoch", "epoch-end"])
@pytest.mark.parametrize(("before", "after"), CHANGES, ids=lambda c: "x".join(map(str, c)))
def test_a_resume_with_other_ranks_batch_or_workers_trains_each_sample_once(
    store, before, after, at_end
):
    (reference,) = loaders(store, 1, 5)
    whole, _ = epoch_rows([reference], store.pad_id)
    assert sum(whole.values()) == reference.sampler.plan.n_samples

    first = loaders(store, *before)
    stop = len(first[0]) if at_end else len(first[0]) // 2
    seen, _ = epoch_rows(first, store.pad_id, stop)
    state = pickle.loads(pickle.dumps(first[0].state_dict()))  # rank 0's, as Lightning saves
    assert state["batch"] == stop

    second = loaders(store, *after, epoch=0)  # a fresh run, restored before it iterates
    for dl in second:
        dl.load_state_dict(state)
    lengths = {len(dl) for dl in second}
    rest, counts = epoch_rows(second, store.pad_id)
    # Lightning restores `stop` finished batches per rank and ends the epoch at len()
    assert lengths == {stop + counts[0]} and set(counts) == {counts[0]}
    step = after[0] * after[1]
    assert counts[0] == -(-(reference.sampler.plan.n_samples - state["consumed"]) // step)
    assert seen + rest == whole  # none skipped, none twice

    for dl in second:  # the next epoch is the new setup's whole epoch
        dl.sampler.set_epoch(2)
    (next_reference,) = loaders(store, 1, 5, epoch=2)
    assert epoch_rows(second, store.pad_id)[0] == epoch_rows([next_reference], store.pad_id)[0]


def test_the_log_says_how_the_position_was_mapped(store, caplog):
    first = loaders(store, 2, 8)
    epoch_rows(first, store.pad_id, 3)
    state = first[0].state_dict()
    n = first[0].sampler.plan.n_samples
    with caplog.at_level(logging.INFO, logger="packlm.data.epoch.loader"):
        for dl in loaders(store, 3, 8, epoch=0):
            dl.load_state_dict(state)
    remain = -(-(n - 48) // 24)
    assert [r.getMessage() for r in caplog.records] == [
        f"resume: 2 rank(s) x batch 8 -> 3 rank(s) x batch 8: epoch 1 continues at sample 48 "
        f"of {n} (3 global batches of 16 samples were done; {remain} of 24 remain, 8 per rank)"
    ]


def test_the_plan_signature_leaves_out_what_an_elastic_resume_may_change():
    assert "batch_size" not in PLAN_KEYS and "num_workers" not in PLAN_KEYS
