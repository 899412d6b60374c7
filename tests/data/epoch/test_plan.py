"""The epoch plan: tails, packing, offsets, determinism, coverage, mixing (invariant 5)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.plans import (
    all_batches,
    config,
    plan_of,
    position_dataset,
    reference_packs,
    reference_windows,
    target_counts,
)
from packlm.data.epoch.packing import greedy_packs
from packlm.data.epoch.plan import GROUP, build_plan
from packlm.data.epoch.windows import validation_config

LENGTHS = [5, 3, 10, 1, 7, 2, 20]  # stream starts 0 5 8 18 19 26 28, total 48


def windows(plan):
    _, g, r = plan.windows(np.arange(plan.n_samples))
    return list(zip(g.tolist(), r.tolist(), strict=True))


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        # T=4, stride 3, packing none: doc 2 (8..18) has full windows at 8, 11 and a tail 16..17;
        # doc 4 (19..26) a full window at 19 and a tail; doc 6 (28..48) ends exactly on a window.
        ("drop", [(0, 5), (5, 3), (8, 5), (11, 5), (18, 1), (19, 5), (26, 2)]),
        ("cover", [(0, 5), (5, 3), (8, 5), (11, 5), (13, 5), (18, 1), (19, 5), (21, 5), (26, 2)]),
        ("pad", [(0, 5), (5, 3), (8, 5), (11, 5), (14, 4), (18, 1), (19, 5), (22, 4), (26, 2)]),
    ],
)
def test_tail_policies_on_hand_computed_documents(tail, expected):
    plan = plan_of(LENGTHS, config(window=4, stride=3, tail=tail, packing="none"))
    doc6 = [(s, 5) for s in range(28, 44, 3)]
    assert windows(plan) == expected + doc6


def test_short_sequences_give_one_padded_sample_whatever_the_tail():
    for tail in ("drop", "cover", "pad"):
        plan = plan_of([1, 2, 3], config(window=4, tail=tail, packing="none"))
        assert windows(plan) == [(0, 1), (1, 2), (3, 3)]


def test_unlimited_pack_is_the_whole_stream():
    plan = plan_of(LENGTHS, config(window=4, stride=3, tail="pad"))
    assert plan.n_sequences == 1
    assert windows(plan) == [(s, 5) for s in range(0, 44, 3)] + [(45, 3)]


def test_greedy_packs_match_a_document_at_a_time_reference():
    rng = np.random.default_rng(0)
    for pack_size in (5, 9, 30, 1000):
        lengths = rng.integers(1, 12, size=500)
        cum = np.concatenate([[0], np.cumsum(lengths)])
        firsts = [p[0] for p in reference_packs(lengths, pack_size)] + [len(lengths)]
        assert greedy_packs(cum, pack_size).tolist() == firsts


def test_a_document_longer_than_the_pack_is_a_sequence_alone_and_never_cut():
    plan = plan_of([2, 50, 2, 2], config(window=4, stride=4, pack_size=6, tail="drop"))
    start, length = plan.sequences(np.arange(plan.n_sequences))
    assert start.tolist() == [0, 2, 52] and length.tolist() == [2, 50, 4]


def test_pack_size_window_plus_one_gives_one_sample_per_pack_and_cuts_no_fitting_document():
    lengths = [3, 2, 4, 5, 1, 1, 2, 9]
    plan = plan_of(lengths, config(window=4, pack_size=5, packing="document"))
    _, length = plan.sequences(np.arange(plan.n_sequences))
    per_pack = np.diff(plan.window_cum)
    assert (per_pack[length <= 5] == 1).all()  # a pack that fits is exactly one (padded) sample
    assert length[length > 5].tolist() == [9]  # only the over-long document is longer
    row, doc, start, piece = plan.pieces(np.arange(plan.n_samples))
    fits = np.asarray(lengths)[doc] <= 5
    assert (start[fits] == 0).all() and (piece[fits] == np.asarray(lengths)[doc[fits]]).all()


def test_a_single_document_store():
    plan = plan_of([13], config(window=4, stride=4, tail="pad", random_offset=True), epoch=3)
    assert plan.n_sequences == 1 and plan.n_samples >= 3
    _, g, r = plan.windows(np.arange(plan.n_samples))
    assert g.min() >= 0 and (g + r).max() <= 13


def test_a_document_longer_than_everything():
    plan = plan_of([1, 10_000, 1], config(window=8, stride=8, packing="none", tail="cover"))
    _, g, r = plan.windows(np.arange(plan.n_samples))
    # two 1-token documents; (10000 - 9) // 8 + 1 = 1249 full windows; one cover window
    assert plan.n_samples == 2 + 1249 + 1
    assert ((g >= 1) & (g + r <= 10_001)).sum() == plan.n_samples - 2


def test_plan_is_deterministic_for_seed_and_epoch_and_differs_between_epochs():
    lengths = np.random.default_rng(1).integers(1, 60, size=300)
    cfg = config(window=16, stride=8, random_offset=True, shuffle=True, shuffle_documents=True)
    a, b, c = plan_of(lengths, cfg, 2), plan_of(lengths, cfg, 2), plan_of(lengths, cfg, 3)
    assert windows(a) == windows(b) and np.array_equal(a.sample_order, b.sample_order)
    assert not np.array_equal(a.order, c.order)
    assert windows(a) != windows(c)
    other_seed = plan_of(lengths, config(**{**cfg.__dict__, "seed": 7}), 2)
    assert not np.array_equal(a.order, other_seed.order)


def test_offsets_are_uniform_over_the_stride_across_epochs():
    stride, window = 8, 16
    lengths = np.full(100, 200)  # every document allows every offset in [0, stride)
    cfg = config(window=window, stride=stride, random_offset=True, packing="none")
    offsets = np.concatenate([plan_of(lengths, cfg, e).offsets for e in range(50)])
    counts = np.bincount(offsets, minlength=stride)
    assert len(counts) == stride
    expected = len(offsets) / stride
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 24.3, counts  # chi-square, 7 degrees of freedom, p = 0.001


def test_offsets_never_push_the_first_window_past_a_short_document():
    cfg = config(window=8, stride=16, random_offset=True, packing="none")
    for e in range(20):
        plan = plan_of([9, 11, 30], cfg, e)
        assert (plan.offsets <= np.minimum(15, np.array([9, 11, 30]) - 9)).all()


@pytest.mark.parametrize("packing", ["none", "document", "stream"])
def test_stride_equal_to_window_targets_every_token_exactly_once(packing):
    """Invariant 5. With tail = pad and no offset every token is a target exactly once,
    except each sequence's first token (nothing precedes it) and, in modes none/document,
    every document's first token (its label would cross documents)."""
    lengths = np.random.default_rng(2).integers(1, 40, size=60)
    cfg = config(window=8, stride=8, packing=packing, tail="pad")
    plan = plan_of(lengths, cfg)
    counts = target_counts(all_batches(plan, position_dataset(lengths, 8), 5), int(lengths.sum()))
    doc_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    never = doc_starts if packing != "stream" else np.array([0])
    expected = np.ones_like(counts)
    expected[never] = 0
    assert np.array_equal(counts, expected)


def test_random_offsets_only_skip_the_tokens_before_the_first_window():
    lengths = np.array([200, 300])
    cfg = config(window=8, stride=8, packing="none", tail="pad", random_offset=True)
    plan = plan_of(lengths, cfg, epoch=5)
    counts = target_counts(all_batches(plan, position_dataset(lengths, 8), 4), 500)
    for start, length, offset in zip([0, 200], lengths, plan.offsets, strict=True):
        assert (counts[start : start + offset + 1] == 0).all()
        assert (counts[start + offset + 1 : start + length] == 1).all()


def test_cover_tail_targets_the_end_twice_at_most_and_drop_never():
    lengths = np.array([30])
    for tail, top in (("cover", 2), ("drop", 1)):
        plan = plan_of(lengths, config(window=8, stride=8, tail=tail, packing="none"))
        counts = target_counts(all_batches(plan, position_dataset(lengths, 8), 4), 30)
        assert counts.max() == top
        assert (counts[-1] == 1) == (tail == "cover")


def test_validation_config_scores_every_token_once():
    cfg = validation_config(
        config(window=8, stride=3, random_offset=True, tail="drop", shuffle=True)
    )
    assert (cfg.stride, cfg.random_offset, cfg.tail, cfg.shuffle) == (8, False, "pad", False)


def test_mixing_weights_repeat_and_subsample_documents_deterministically():
    sources = np.repeat([0, 1, 2], [100, 200, 50])
    lengths = np.full(350, 10)
    cfg = config(shuffle_documents=True)
    weights = [2.0, 0.5, 1.25]
    plan = plan_of(lengths, cfg, 0, doc_sources=sources, weights=weights)
    per_source = np.bincount(sources[plan.order], minlength=3)
    assert per_source.tolist() == [200, 100, 62]  # floor(w)*n + round(frac(w)*n)
    copies = np.bincount(plan.order, minlength=350)
    assert (
        (copies[:100] == 2).all() and set(copies[100:300]) == {0, 1} and set(copies[300:]) == {1, 2}
    )
    again = plan_of(lengths, cfg, 0, doc_sources=sources, weights=weights)
    later = plan_of(lengths, cfg, 1, doc_sources=sources, weights=weights)
    assert np.array_equal(plan.order, again.order)
    assert not np.array_equal(np.sort(plan.order), np.sort(later.order))  # a fresh subsample


def test_mixing_gives_the_expected_sample_proportions():
    sources = np.repeat([0, 1], [300, 300])
    lengths = np.random.default_rng(3).integers(20, 40, size=600)
    cfg = config(window=16, stride=16, shuffle=True, shuffle_documents=True)
    plan = plan_of(lengths, cfg, 0, doc_sources=sources, weights=[3.0, 1.0])
    ordered = np.concatenate([[0], np.cumsum(lengths[plan.order])])
    _, g, _ = plan.windows(np.arange(plan.n_samples))
    first = sources[plan.order[np.searchsorted(ordered, g, side="right") - 1]]
    share = (first == 0).mean()
    assert abs(share - 0.75) < 0.03
    # the shuffled order spreads both sources over the epoch: every tenth has both
    tenths = np.array_split(first[plan.sample_order], 10)
    assert all(0.6 < (t == 0).mean() < 0.9 for t in tenths)


def test_stream_positions_agree_with_a_plain_cumsum():
    lengths = np.random.default_rng(4).integers(0, 9, size=5 * GROUP + 3)  # empty documents too
    plan = plan_of(lengths, config(shuffle_documents=True))
    cum = np.concatenate([[0], np.cumsum(lengths[plan.order])])
    j = np.arange(len(lengths) + 1)
    assert np.array_equal(plan.doc_start(j), cum)
    g = np.arange(cum[-1])
    assert np.array_equal(cum[plan.locate(g)] <= g, np.ones_like(g, dtype=bool))
    assert (cum[plan.locate(g) + 1] > g).all()


def test_an_empty_store_plans_nothing():
    for packing in ("none", "document"):
        plan = build_plan(np.zeros(0, np.int64), config(packing=packing), 0)
        assert plan.n_samples == 0 and windows(plan) == []


def test_reference_windows_agree_for_every_mode():
    lengths = np.random.default_rng(5).integers(1, 30, size=40)
    for packing, pack_size in (("none", None), ("document", None), ("stream", 12)):
        for tail in ("drop", "cover", "pad"):
            cfg = config(
                window=5,
                stride=3,
                packing=packing,
                pack_size=pack_size,
                tail=tail,
                random_offset=True,
            )
            plan = plan_of(lengths, cfg, 1)
            _, length, offset, _ = plan.layout(np.arange(plan.n_sequences))
            assert windows(plan) == reference_windows(length, offset, 5, 3, tail)


def test_a_mixing_weight_that_would_not_fit_is_refused_naming_the_key():
    from packlm.errors import ConfigError

    lengths = np.full(2000, 5)
    sources = np.arange(2000) % 2
    with pytest.raises(
        ConfigError, match=r"^data\.sources\[1\]\.weight=1000000\.0: an epoch would hold"
    ):
        build_plan(lengths, config(), 0, sources, [1.0, 1e6])
    plan = build_plan(lengths, config(), 0, sources, [1.0, 3.0])
    assert plan.n_documents == 1000 + 3000


def test_group_by_keeps_groups_adjacent_and_shuffles_them_per_epoch():
    from packlm.data.epoch.order import directory_groups, epoch_documents

    groups = np.repeat(np.arange(20), np.arange(1, 21))  # 20 groups of 1..20 documents
    cfg = config(shuffle_documents=True, group_by="source")
    orders = [epoch_documents(len(groups), cfg, e, doc_groups=groups) for e in range(3)]
    for order in orders:
        assert sorted(order.tolist()) == list(range(len(groups)))  # every document once
        g = groups[order]
        assert (np.diff(g) != 0).sum() == 19  # each group one contiguous run
        runs = np.split(order, np.flatnonzero(np.diff(g)) + 1)
        assert all((np.diff(run) > 0).all() for run in runs)  # store order inside a group
    first_groups = [
        groups[o][np.r_[0, np.flatnonzero(np.diff(groups[o])) + 1]].tolist() for o in orders
    ]
    assert first_groups[0] != first_groups[1] != first_groups[2]  # groups reshuffled per epoch
    again = epoch_documents(len(groups), cfg, 1, doc_groups=groups)
    assert np.array_equal(again, orders[1])  # a pure function of (seed, epoch)
    ids = ["0:a/x.py", "0:a/y.py", "0:b/z.py:3", "1:a/x.py", "0:top.txt"]
    assert directory_groups(ids).tolist() == [1, 1, 2, 3, 0]  # per (source, directory)


@pytest.mark.parametrize("tail", ["pad", "cover", "drop"])
def test_snap_moves_window_starts_to_document_starts_within_the_tolerance(tail):
    lengths = np.random.default_rng(3).integers(1, 30, size=300)
    base = dict(window=16, stride=12, tail=tail, random_offset=True, seed=4)
    plain = plan_of(lengths, config(**base))
    snapped = plan_of(lengths, config(**base, snap="document", snap_tolerance=5))
    assert snapped.n_samples == plain.n_samples  # the same windows, some moved
    ids = np.arange(plain.n_samples)
    s0, g0, _ = plain.windows(ids)
    s1, g1, r1 = snapped.windows(ids)
    starts = set(np.cumsum(np.r_[0, lengths[snapped.order]])[:-1].tolist())
    moved = g1 != g0
    assert moved.any() and (g1 >= g0).all() and (g1 - g0 <= 5).all()
    assert all(int(g) in starts for g in g1[moved])  # moved only onto document starts
    on_start = np.isin(g1, list(starts)).mean()
    assert on_start > np.isin(g0, list(starts)).mean()  # fewer samples start mid-document
    seq_start, seq_len = snapped.sequences(s1)
    assert ((g1 + r1 <= seq_start + seq_len) & (r1 >= 2)).all()  # inside, with a target
    again = plan_of(lengths, config(**base, snap="document", snap_tolerance=5))
    assert np.array_equal(again.windows(ids)[1], g1)  # still a pure function


def test_snap_settings_are_checked_and_validation_never_snaps():
    from packlm.data.epoch.windows import validation_config
    from packlm.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"^data\.snap_tolerance=8: must be less than data\.stride=8"
    ):
        config(stride=8, snap="document", snap_tolerance=8)
    with pytest.raises(ConfigError, match=r"^data\.snap='sentence'"):
        config(snap="sentence")
    assert validation_config(config(snap="document", snap_tolerance=1)).snap == "none"
