"""Samples from the store, rank/worker sharding (invariant 6), resumable loaders (invariant 7)."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest

from helpers.plans import config, loader_over, plan_of, write_position_store
from packlm.data.epoch.collate import Samples
from packlm.data.epoch.loader import WindowDataset
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import BatchPieces, PlanSampler
from packlm.errors import ConfigError

LENGTHS = np.random.default_rng(0).integers(1, 50, size=120)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    sources = np.arange(len(LENGTHS)) % 2
    return write_position_store(
        tmp_path_factory.mktemp("s") / "store", LENGTHS, sources.tolist(), ["a", "b"]
    )


def loader(store, cfg, rank=0, world=1, workers=0, epoch=0, weights=None):
    lengths = np.diff(store.doc_offsets)
    sources = np.asarray(store.doc_sources)
    sampler = PlanSampler(
        lambda e: build_plan(lengths, cfg, e, sources, weights), cfg.batch_size, rank, world, epoch
    )
    return loader_over(store, cfg, sampler, workers, weights)


def rows(batches, pad_id):
    """(first token, real tokens) of every non-padding row: identifies a sample."""
    out = []
    for b in batches:
        ids = b["input_ids"].numpy()
        for r in ids:
            real = r != pad_id
            if real.any():
                out.append((int(r[0]), int(real.sum())))
    return out


def test_samples_read_exactly_the_planned_stream_slices(store):
    cfg = config(
        window=16,
        stride=11,
        packing="stream",
        random_offset=True,
        shuffle=True,
        shuffle_documents=True,
    )
    plan = build_plan(np.diff(store.doc_offsets), cfg, 3, np.asarray(store.doc_sources), [1.5, 0.5])
    stream = np.concatenate([store.document(d) for d in plan.order])  # the epoch, naively
    ids = plan.sample_ids(np.arange(plan.n_samples))
    _, g, r = plan.windows(ids)
    dataset = WindowDataset(store.path, 16, store.pad_id)
    for lo in range(0, len(ids), 7):
        got = dataset[BatchPieces(7, np.stack(plan.pieces(ids[lo : lo + 7])))]
        for k, (start, n) in enumerate(zip(g[lo : lo + 7], r[lo : lo + 7], strict=True)):
            assert got.tokens[k, :n].tolist() == stream[start : start + n].tolist()
            assert (got.tokens[k, n:] == store.pad_id).all() and (got.segments[k, n:] == -1).all()


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 3 workers on a 2-core CI
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_ranks_and_workers_yield_each_planned_sample_exactly_once(store, workers):
    cfg = config(
        window=16, stride=8, random_offset=True, shuffle=True, shuffle_documents=True, batch_size=5
    )
    plan = build_plan(np.diff(store.doc_offsets), cfg, 0)
    _, g, r = plan.windows(np.arange(plan.n_samples))
    # the store's token at position p is p, so a row's first token and length name its sample
    order = plan.order
    stream_to_store = np.concatenate(
        [np.arange(store.doc_offsets[d], store.doc_offsets[d + 1]) for d in order]
    )
    planned = Counter(zip(stream_to_store[g].tolist(), np.minimum(r, 16).tolist(), strict=True))
    world = 3
    seen, lengths = Counter(), set()
    for rank in range(world):
        dl = loader(store, cfg, rank, world, workers)
        batches = list(dl)
        lengths.add(len(batches))
        assert len(batches) == len(dl)
        seen.update(rows(batches, store.pad_id))
    assert lengths == {-(-plan.n_samples // (world * 5))}  # equal batch counts on every rank
    assert seen == planned


def test_a_restored_loader_continues_exactly_where_the_first_stopped(store):
    cfg = config(
        window=8, stride=5, random_offset=True, shuffle=True, shuffle_documents=True, batch_size=4
    )
    full = [b["input_ids"] for b in loader(store, cfg, workers=2, epoch=1)]
    first = loader(store, cfg, workers=2, epoch=1)
    it = iter(first)
    for _ in range(7):  # workers prefetch further; the state must count only these 7
        next(it)
    state = first.state_dict()
    assert state["epoch"] == 1 and state["consumed"] == 7 * 4
    fresh = loader(store, cfg, workers=2, epoch=0)
    fresh.load_state_dict(pickle.loads(pickle.dumps(state)))
    rest = [b["input_ids"] for b in fresh]
    assert len(rest) == len(full) - 7
    assert all((a == b).all() for a, b in zip(rest, full[7:], strict=True))
    fresh.sampler.set_epoch(2)  # the next epoch starts from its beginning
    assert len(list(fresh)) == len(fresh)


def test_an_older_saved_epoch_does_not_rewind_a_newer_loader(store):
    cfg = config(window=8, batch_size=4)
    dl = loader(store, cfg, epoch=3)
    dl.load_state_dict({"epoch": 2, "consumed": 12, "plan_signature": dl.signature})
    assert dl.state_dict()["epoch"] == 3 and dl.state_dict()["consumed"] == 0
    assert len(list(dl)) == len(dl)


def test_resuming_with_another_data_config_is_a_clear_error(store):
    state = loader(store, config(window=8, stride=8)).state_dict()
    with pytest.raises(ConfigError, match=r"data\.stride: 8 in the checkpoint, 4 now"):
        loader(store, config(window=8, stride=4)).load_state_dict(state)


def test_the_dataset_pickles_without_its_memmap(store):
    ds = WindowDataset(store.path, 8, store.pad_id)
    _ = ds.store  # opened
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._store is None and len(pickle.dumps(ds)) < 1000
    assert isinstance(
        clone[next(iter(PlanSampler(lambda e: plan_of(LENGTHS, config(window=8)), 2)))], Samples
    )
