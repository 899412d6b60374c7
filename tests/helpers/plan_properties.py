"""Properties of the epoch plan over random store shapes and configs, run by the default
property tests (150 cases) and by the slow fuzzing (3,000 cases)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from helpers.plans import (
    PAD,
    all_batches,
    config,
    plan_of,
    position_dataset,
    reference_packs,
    reference_windows,
    target_counts,
)
from packlm.data.epoch.statistics import plan_statistics


@st.composite
def plan_cases(draw):
    """(document lengths, data config, epoch, mixing kwargs) of a random small plan."""
    lengths = np.array(draw(st.lists(st.integers(0, 40), min_size=0, max_size=40)), dtype=np.int64)
    window = draw(st.integers(1, 10))
    packing = draw(st.sampled_from(["none", "document", "stream"]))
    pack_size = (
        None if packing == "none" or draw(st.booleans()) else window + 1 + draw(st.integers(0, 30))
    )
    cfg = config(
        window=window,
        stride=draw(st.integers(1, 14)),
        tail=draw(st.sampled_from(["drop", "cover", "pad"])),
        packing=packing,
        pack_size=pack_size,
        random_offset=draw(st.booleans()),
        shuffle=draw(st.booleans()),
        shuffle_documents=draw(st.booleans()),
        seed=draw(st.integers(0, 2**40)),
    )
    mix = {}
    if draw(st.booleans()):
        mix = dict(
            doc_sources=np.arange(len(lengths)) % 2,
            weights=draw(
                st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0, 0.25]), min_size=2, max_size=2)
            ),
        )
    return lengths, cfg, draw(st.integers(0, 5)), mix


def check_samples_follow_the_reference(case) -> None:
    """Every sample is the reference window, inside its sequence, once; pieces add up."""
    lengths, cfg, epoch, mix = case
    plan = plan_of(lengths, cfg, epoch, **mix)
    seq_start, seq_len, offset, _ = plan.layout(np.arange(plan.n_sequences))
    assert seq_len.sum() == plan.n_tokens == lengths[plan.order].sum()
    assert np.array_equal(seq_start, np.cumsum(np.r_[0, seq_len])[:-1])
    assert (offset >= 0).all() and (
        offset <= np.clip(np.minimum(cfg.stride - 1, seq_len - cfg.window - 1), 0, None)
    ).all()
    if cfg.pack_size is not None:
        packs = reference_packs(lengths[plan.order], cfg.pack_size)
        assert plan.seq_first.tolist() == [p[0] for p in packs] + [len(plan.order)]

    s, g, r = plan.windows(np.arange(plan.n_samples))
    assert list(zip(g.tolist(), r.tolist(), strict=True)) == reference_windows(
        seq_len, offset, cfg.window, cfg.stride, cfg.tail
    )
    assert ((r >= 1) & (r <= cfg.window + 1)).all()
    assert (g >= seq_start[s]).all() and (g + r <= seq_start[s] + seq_len[s]).all()
    assert len(np.unique(g)) == len(g)  # no sample twice
    if plan.sample_order is not None:
        assert np.array_equal(np.sort(plan.sample_order), np.arange(plan.n_samples))

    row, _, _, piece = plan.pieces(np.arange(plan.n_samples))
    assert np.array_equal(np.bincount(row, weights=piece, minlength=plan.n_samples), r)


def check_statistics_match_the_batches(case) -> None:
    """The plan statistics equal the counts read off the collated batches."""
    lengths, cfg, epoch, mix = case
    plan = plan_of(lengths, cfg, epoch, **mix)
    stats = plan_statistics(plan)
    batches = all_batches(plan, position_dataset(lengths, cfg.window), 4)
    ids = np.concatenate([b["input_ids"].numpy() for b in batches]) if batches else np.zeros((0, 1))
    labels = np.concatenate([b["labels"].numpy() for b in batches]) if batches else np.zeros((0, 1))
    assert stats["samples"] == int((ids[:, 0] != PAD).sum())
    assert stats["nonpad_tokens"] == int((ids != PAD).sum())
    assert stats["supervised_tokens"] == int((labels >= 0).sum())
    hist = stats["histograms"]["target_multiplicity"]
    assert hist.num == plan.n_tokens and hist.sum == stats["supervised_tokens"]
    if not mix:  # every stream position is a distinct store position
        counts = target_counts(batches, int(lengths.sum()))
        assert hist.counts.tolist() == np.bincount(counts, minlength=1).tolist()
