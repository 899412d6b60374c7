"""packlm.batch: the contract's table matches what collate makes, the curriculum's count
from pieces equals the label rule, and the varlen runs and positions isolate documents."""

from __future__ import annotations

import re

import numpy as np
import pytest

import packlm.batch
from helpers.plans import all_batches, config, plan_of, position_dataset
from packlm.batch import (
    DOCUMENT_KEY,
    IGNORE_INDEX,
    KEYS,
    SOURCE_KEY,
    VARLEN_KEYS,
    make_batch,
    piece_targets,
)
from packlm.data.epoch.curriculum import sample_targets

LENGTHS = [3, 1, 6, 2, 9, 1, 4]


def test_the_documented_table_names_exactly_the_keys_made():
    documented = re.findall(r"^\| `(\w+)` \|", packlm.batch.__doc__, flags=re.M)
    tokens = np.arange(12).reshape(2, 6)
    segments = np.array([[0, 0, 1, 1, 1, -1], [0, 0, 0, 0, 0, 0]], dtype=np.int32)
    assert documented == [*KEYS, *VARLEN_KEYS, SOURCE_KEY, DOCUMENT_KEY]
    assert list(make_batch(tokens, segments, "document")) == list(KEYS)
    made = make_batch(tokens, segments, "document", varlen=True, sources=segments.astype(np.int16),
                      documents=segments)  # fmt: skip
    assert sorted(made) == sorted(documented)


@pytest.mark.parametrize("packing", ["none", "document", "stream"])
def test_the_count_from_pieces_is_the_label_rule(packing):
    """The curriculum counts a batch's targets from the plan's pieces, without reading
    tokens; it must agree with the labels collate makes, row by row."""
    plan = plan_of(LENGTHS, config(window=5, stride=3, packing=packing, tail="pad"))
    batches = all_batches(plan, position_dataset(LENGTHS, 5), batch_size=3)
    labels = np.concatenate([b["labels"].numpy() for b in batches])[: plan.n_samples]
    counted = sample_targets(plan, np.arange(plan.n_samples))
    assert np.array_equal(counted, (labels != IGNORE_INDEX).sum(axis=1))
    row = np.array([0, 0, 1]), np.array([2, 3, 5])
    assert piece_targets(*row, 3, packing).tolist() == (
        [4, 4, 0] if packing == "stream" else [3, 4, 0]
    )


def test_positions_restart_per_document_and_run_on_in_stream():
    tokens = np.arange(7)[None]  # 3 documents: [0 1] [2 3 4] [5], then PAD
    segments = np.array([[0, 0, 1, 1, 1, 2, -1]], dtype=np.int32)
    doc = make_batch(tokens, segments, "document")
    assert doc["position_ids"].tolist() == [[0, 1, 0, 1, 2, 0]]
    assert doc["labels"].tolist() == [[1, IGNORE_INDEX, 3, 4, IGNORE_INDEX, IGNORE_INDEX]]
    stream = make_batch(tokens, segments, "stream")
    assert stream["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5]]
    assert stream["labels"].tolist() == [[1, 2, 3, 4, 5, IGNORE_INDEX]]


def test_varlen_runs_cover_the_flattened_rows_one_document_each():
    plan = plan_of(LENGTHS, config(window=6, stride=4, packing="document", tail="pad"))
    (batch, *_) = all_batches(plan, position_dataset(LENGTHS, 6), batch_size=4)
    tokens = np.concatenate([batch["input_ids"].numpy(), batch["labels"].numpy()[:, -1:]], 1)
    seg = batch["segment_ids"].numpy()
    out = make_batch(tokens, np.concatenate([seg, seg[:, -1:]], 1), "document", varlen=True)
    cu, flat = out["cu_seqlens"], seg.ravel()
    assert cu[0] == 0 and cu[-1] == seg.size and (np.diff(cu) > 0).all()
    assert int(out["max_seqlen"]) == np.diff(cu).max()
    row_of = np.arange(seg.size) // seg.shape[1]
    for a, b in zip(cu[:-1], cu[1:], strict=True):
        assert len(set(flat[a:b])) == 1 and len(set(row_of[a:b])) == 1  # one id, one row
    starts = np.r_[True, (flat[1:] != flat[:-1]) | (row_of[1:] != row_of[:-1])]
    assert np.array_equal(np.flatnonzero(starts), cu[:-1])
