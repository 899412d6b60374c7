"""Issue #59, family 3: a batch size larger than the split (`data.batch_size=10**12`, typed
by a user who means "all of it in one batch") costs the samples the split holds, not the
number typed. Before: the sampler built an index of 10**12 slots and the dataset a batch of
10**12 rows of PAD: `python train.py data.batch_size=1000000000000` and `python -m
packlm.evaluate ... data.batch_size=1000000000000` ended in numpy's "Unable to allocate
7.28 TiB" traceback. And evaluate counted PAD rows as windows (48 for 35 windows at
data.batch_size=16)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.plans import config, loader_over, write_position_store
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import PlanSampler

LENGTHS = np.random.default_rng(1).integers(1, 40, size=50)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_position_store(tmp_path_factory.mktemp("s") / "store", LENGTHS, [0] * 50, ["a"])


def _batches(store, batch_size, rank=0, world=1):
    cfg = config(window=16, stride=16, shuffle=True, batch_size=batch_size)
    lengths = np.diff(store.doc_offsets)
    plan = build_plan(lengths, cfg, 0)
    sampler = PlanSampler(lambda e: build_plan(lengths, cfg, e), batch_size, rank, world)
    return plan.n_samples, list(loader_over(store, cfg, sampler))


def _real_rows(batches, pad_id) -> list[tuple[int, ...]]:
    return [
        tuple(row.tolist())
        for b in batches
        for row in b["input_ids"].numpy()
        if (row != pad_id).any()
    ]


@pytest.mark.parametrize("world", [1, 3])
def test_a_batch_larger_than_the_split_holds_its_samples_and_no_more(store, world):
    for rank in range(world):
        n, huge = _batches(store, 10**12, rank, world)
        _, whole = _batches(store, -(-n // world), rank, world)  # one batch: the rank's share
        assert len(huge) == len(whole) == 1
        assert huge[0]["input_ids"].shape == whole[0]["input_ids"].shape
        assert huge[0]["input_ids"].shape[0] == -(-n // world)
        assert _real_rows(huge, store.pad_id) == _real_rows(whole, store.pad_id)


def test_a_batch_smaller_than_the_split_keeps_its_shape(store):
    """Rows of PAD still fill the last batch of an epoch, so every batch has B rows."""
    n, batches = _batches(store, 7)
    assert n % 7 and {b["input_ids"].shape[0] for b in batches} == {7}
    assert len(_real_rows(batches, store.pad_id)) == n
