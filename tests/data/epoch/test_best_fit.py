"""Best-fit packing (data.pack_strategy=best_fit): a permutation of the epoch order plus pack
boundaries, never cutting a document, tighter than ordered packing, a pure function of
(seed, epoch), and the loader invariants (ranks x workers once, exact resume) still hold."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.packing_checks import check_exact_resume, check_ranks_and_workers_exactly_once
from helpers.plans import config, plan_of, write_position_store
from packlm.data.epoch.order import epoch_documents
from packlm.data.epoch.packing.best_fit import best_fit_packs
from packlm.data.epoch.statistics import plan_statistics
from packlm.errors import ConfigError


def reference_best_fit(lengths_in_order, cap, buffer_of):
    """The packing of the module doc, one document and one pack at a time: packs as lists
    of epoch positions, in output order."""
    n = len(lengths_in_order)
    packs = [[j] for j in range(n) if lengths_in_order[j] >= cap]
    for b in sorted(set(buffer_of)):
        left = [j for j in range(n) if buffer_of[j] == b and lengths_in_order[j] < cap]
        left.sort(key=lambda j: (lengths_in_order[j], -j))  # the last is taken first
        while left:
            tokens = sum(lengths_in_order[j] for j in left)
            halves = sum(2 * lengths_in_order[j] > cap for j in left)
            k = min(max(halves, -(-tokens // cap), 1), len(left))
            opened = [[j] for j in left[len(left) - k :]]
            left = left[: len(left) - k]
            packs += opened
            open_ = [(cap - lengths_in_order[p[0]], p) for p in opened]
            while open_ and left:
                open_.sort(key=lambda fp: -fp[0])  # stable: ties keep their order
                kept = []
                for free, pack in open_:
                    fits = [j for j in left if lengths_in_order[j] <= free]
                    if fits:
                        pack.append(fits[-1])
                        left.remove(fits[-1])
                        kept.append((free - lengths_in_order[fits[-1]], pack))
                open_ = kept
    packs = [sorted(p) for p in packs]
    return sorted(packs, key=lambda p: p[0])


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_packing_equals_the_one_at_a_time_reference(seed):
    rng = np.random.default_rng(seed)
    n, cap = int(rng.integers(0, 90)), int(rng.integers(5, 40))
    lengths = rng.integers(0, cap + 10, size=n) if seed % 3 else rng.integers(1, 6, size=n)
    buffer = int(rng.integers(2, 30))
    groups = rng.integers(0, 3, size=n) if seed % 2 else None
    order = rng.permutation(n).astype(np.int32)
    new_order, seq_first, seq_len = best_fit_packs(order, lengths, cap, buffer, groups)
    if groups is None:
        buffer_of = [j // buffer for j in range(n)]
    else:  # buffers restart at every change of group along the epoch order
        g, buffer_of, b, run = groups[order], [], -1, 0
        for j in range(n):
            run = 0 if j == 0 or g[j] != g[j - 1] else run + 1
            b += run % buffer == 0
            buffer_of.append(b)
    packs = reference_best_fit(lengths[order].tolist(), cap, buffer_of)
    assert seq_first.tolist() == np.cumsum([0] + [len(p) for p in packs]).tolist()
    assert new_order.tolist() == [int(order[j]) for p in packs for j in p]
    assert seq_len.tolist() == [int(lengths[order[p]].sum()) for p in packs]


def packs_of(plan):
    starts = plan.seq_first
    return [plan.order[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]


@pytest.mark.parametrize("mix", [False, True])
def test_every_document_once_in_one_pack_never_cut_and_within_pack_size(mix):
    lengths = np.random.default_rng(1).integers(1, 60, size=500)
    kw = dict(doc_sources=np.arange(500) % 2, weights=[1.5, 0.5]) if mix else {}
    cfg = config(window=31, stride=32, pack_size=64, pack_strategy="best_fit", pack_buffer=50,
                 shuffle_documents=True, seed=3)  # fmt: skip
    plan = plan_of(lengths, cfg, epoch=2, **kw)
    ordered = epoch_documents(500, cfg, 2, kw.get("doc_sources"), kw.get("weights"))
    assert sorted(plan.order.tolist()) == sorted(ordered.tolist())  # a permutation of the epoch
    seq_start, seq_len, _, _ = plan.layout(np.arange(plan.n_sequences))
    assert np.array_equal(seq_start, np.cumsum(np.r_[0, seq_len])[:-1])
    for docs, n in zip(packs_of(plan), seq_len, strict=True):
        assert n == lengths[docs].sum()  # whole documents only
        assert n <= 64 or len(docs) == 1  # over pack_size only for a document alone
    row, doc, start, piece = plan.pieces(np.arange(plan.n_samples))
    assert (start + piece <= lengths[doc]).all()


def test_a_pack_holds_one_buffer_in_epoch_order_and_packs_follow_the_epoch_order():
    lengths = np.random.default_rng(2).integers(1, 30, size=300)
    cfg = config(window=40, stride=41, pack_size=41, pack_strategy="best_fit", pack_buffer=37,
                 shuffle_documents=True)  # fmt: skip
    plan = plan_of(lengths, cfg, epoch=1)
    position = np.argsort(epoch_documents(300, cfg, 1))  # epoch position of each document
    firsts = []
    for docs in packs_of(plan):
        pos = position[docs]
        assert (np.diff(pos) > 0).all() and len(set(pos // 37)) == 1
        firsts.append(pos[0])
    assert (np.diff(firsts) > 0).all()


def test_with_group_by_a_pack_holds_one_group_and_groups_stay_adjacent():
    rng = np.random.default_rng(4)
    lengths, groups = rng.integers(1, 25, size=400), rng.integers(0, 9, size=400)
    cfg = config(window=40, stride=41, pack_size=41, pack_strategy="best_fit", pack_buffer=16,
                 shuffle_documents=True, group_by="source")  # fmt: skip
    plan = plan_of(lengths, cfg, epoch=3, doc_groups=groups)
    assert all(len(set(groups[docs])) == 1 for docs in packs_of(plan))
    runs = groups[plan.order]
    assert (np.diff(runs) != 0).sum() == len(set(groups.tolist())) - 1  # one run per group


def test_a_pure_function_of_seed_and_epoch():
    lengths = np.random.default_rng(5).integers(1, 80, size=400)
    cfg = config(window=63, stride=64, pack_size=64, pack_strategy="best_fit", pack_buffer=64,
                 shuffle_documents=True, shuffle=True, random_offset=True)  # fmt: skip
    a, b, c = plan_of(lengths, cfg, 1), plan_of(lengths, cfg, 1), plan_of(lengths, cfg, 2)
    for key in ("order", "seq_first", "offsets", "sample_order"):
        assert np.array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.order, c.order)


def fill(lengths, strategy, **kw):
    cfg = config(pack_strategy=strategy, shuffle_documents=True, **kw)
    return plan_statistics(plan_of(lengths, cfg, epoch=0))


@pytest.mark.parametrize("seed", range(6))
def test_best_fit_fills_at_least_as_well_as_ordered_on_random_corpora(seed):
    rng = np.random.default_rng(seed)
    lengths = [
        rng.integers(1, 300, size=3000),
        np.maximum(1, rng.lognormal(4.0, 1.0, size=3000).astype(np.int64)),
        rng.integers(2, 20, size=3000),
    ][seed % 3]
    kw = dict(window=128, stride=128, pack_size=129, pack_buffer=int(rng.integers(16, 1024)))
    ordered, best = fill(lengths, "ordered", **kw), fill(lengths, "best_fit", **kw)
    assert best["fill_ratio"] >= ordered["fill_ratio"]
    assert best["sequences"] <= ordered["sequences"]
    assert best["stream_tokens"] == ordered["stream_tokens"]  # the same documents


def test_best_fit_is_strictly_tighter_on_a_crafted_corpus():
    lengths = np.array([6, 6, 4, 4] * 25)  # ordered: [6] [6 4] [4 6] ... ; best fit: [6 4] only
    kw = dict(window=9, stride=10, pack_size=10, pack_buffer=100)
    cfg = dict(shuffle_documents=False)
    ordered = plan_statistics(plan_of(lengths, config(pack_strategy="ordered", **kw, **cfg)))
    best = plan_statistics(plan_of(lengths, config(pack_strategy="best_fit", **kw, **cfg)))
    assert best["sequences"] == 50 < ordered["sequences"]
    assert best["fill_ratio"] == 1.0 > ordered["fill_ratio"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    lengths = np.random.default_rng(6).integers(1, 40, size=150)
    return write_position_store(tmp_path_factory.mktemp("bf") / "store", lengths)


def best_fit_config():
    return config(window=16, stride=8, pack_size=40, pack_strategy="best_fit", pack_buffer=24,
                  random_offset=True, shuffle=True, shuffle_documents=True, batch_size=5)  # fmt: skip


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_ranks_and_workers_yield_each_best_fit_sample_exactly_once(store):
    cfg = best_fit_config()
    lengths = np.diff(store.doc_offsets)
    check_ranks_and_workers_exactly_once(store, cfg, lambda e: plan_of(lengths, cfg, e))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_resumed_best_fit_loader_continues_exactly(store):
    cfg = best_fit_config()
    lengths = np.diff(store.doc_offsets)
    check_exact_resume(store, cfg, lambda e: plan_of(lengths, cfg, e))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(pack_strategy="tightest", pack_size=20), r"^data\.pack_strategy='tightest'"),
        (dict(pack_buffer=1, pack_size=20), r"^data\.pack_buffer=1"),
        (dict(pack_buffer=True, pack_size=20), r"^data\.pack_buffer=True"),
        (dict(pack_strategy="best_fit"), r"^data\.pack_strategy=best_fit: .*pack_size"),
        (dict(pack_strategy="best_fit", packing="none"), r"^data\.pack_strategy=best_fit"),
    ],
)
def test_bad_packing_settings_name_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        config(**overrides)
