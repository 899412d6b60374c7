"""Collate: the batch contract of DESIGN.md, including invariant 3."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.plans import PAD, all_batches, config, plan_of, position_dataset
from packlm.data.epoch.collate import IGNORE_INDEX, Samples, collate


def row(tokens, segments, width):
    """One row of Samples padded to `width` = T+1."""
    t = np.full((1, width), PAD, dtype=np.int64)
    s = np.full((1, width), -1, dtype=np.int32)
    t[0, : len(tokens)], s[0, : len(segments)] = tokens, segments
    return Samples(t, s)


def test_worked_example_of_invariant_3():
    batch = collate(row([1, 2, 3, 4, 5], [0, 0, 0, 1, 1], 6), "document")
    assert batch["labels"].tolist() == [[2, 3, IGNORE_INDEX, 5, IGNORE_INDEX]]
    assert int((batch["labels"] != IGNORE_INDEX).sum()) == 3
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert batch["segment_ids"].tolist() == [[0, 0, 0, 1, 1]]


def test_dtypes_and_shapes():
    batch = collate(row([1, 2, 3], [0, 0, 0], 6), "document")
    expected = {
        "input_ids": torch.int64,
        "labels": torch.int64,
        "segment_ids": torch.int32,
        "position_ids": torch.int64,
    }
    assert {k: v.dtype for k, v in batch.items()} == expected
    assert all(v.shape == (1, 5) for v in batch.values())


def test_stream_mode_lets_targets_cross_documents_and_counts_positions_from_the_row_start():
    batch = collate(row([1, 2, 3, 4, 5, 6], [0, 0, 0, 1, 1, 1], 6), "stream")
    assert batch["labels"].tolist() == [[2, 3, 4, 5, 6]]
    assert batch["segment_ids"].tolist() == [[0, 0, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4]]


def test_padding_is_never_a_target_nor_a_segment():
    batch = collate(row([7, 8], [0, 0], 6), "stream")
    assert batch["input_ids"].tolist() == [[7, 8, PAD, PAD, PAD]]
    assert batch["labels"].tolist() == [[8, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch["segment_ids"].tolist() == [[0, 0, -1, -1, -1]]
    assert batch["position_ids"].tolist() == [[0, 1, 0, 0, 0]]


@pytest.mark.parametrize("packing", ["none", "document", "stream"])
def test_each_mode_on_a_real_plan(packing):
    """Segments count documents inside each row (a window may start mid-document: segment 0),
    positions restart at each document start, labels follow the mode's rule."""
    lengths = [3, 1, 6, 2]  # stream positions 0..2 | 3 | 4..9 | 10..11
    plan = plan_of(lengths, config(window=5, stride=5, packing=packing, tail="pad"))
    (batch,) = all_batches(plan, position_dataset(lengths, 5), batch_size=4)
    doc_of = np.repeat(np.arange(4), lengths)
    for b in range(batch["input_ids"].shape[0]):  # the plan's rows (a batch holds no more)
        ids, seg = batch["input_ids"][b].numpy(), batch["segment_ids"][b].numpy()
        real = ids != PAD
        if not real.any():
            continue
        docs = doc_of[ids[real]]
        if packing == "stream":
            assert (seg[real] == 0).all()
            assert batch["position_ids"][b, real].tolist() == list(range(real.sum()))
        else:
            assert seg[real].tolist() == (np.cumsum(np.r_[0, np.diff(docs) != 0])).tolist()
            starts = np.r_[True, np.diff(docs) != 0]
            pos = batch["position_ids"][b, real].numpy()
            assert (pos[starts] == 0).all() and (
                pos[~starts] == pos[np.flatnonzero(~starts) - 1] + 1
            ).all()
        lab = batch["labels"][b].numpy()
        for i in np.flatnonzero(lab != IGNORE_INDEX):
            assert lab[i] == ids[i] + 1  # position store: the next token is the next position
            assert packing == "stream" or doc_of[lab[i]] == doc_of[ids[i]]
    if packing == "none":  # one document per row
        assert batch["input_ids"][:, 0].tolist()[:3] == [0, 3, 4]


def test_one_token_documents_and_padding_rows():
    lengths = [1, 1, 1]
    plan = plan_of(lengths, config(window=4, packing="none"))
    first, last = all_batches(plan, position_dataset(lengths, 4), batch_size=2)
    batch = {k: torch.cat([first[k], last[k]]) for k in first}
    assert batch["input_ids"][:, 0].tolist() == [0, 1, 2, PAD]  # row 3: the last batch's padding
    assert (batch["labels"] == IGNORE_INDEX).all()  # a 1-token document has nothing to predict
    assert batch["segment_ids"][:3, 0].tolist() == [0, 0, 0]
    assert (batch["segment_ids"][3:] == -1).all() and (batch["segment_ids"][:, 1:] == -1).all()
