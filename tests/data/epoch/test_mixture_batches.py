"""Global batches of a mixture by share: each source's rows come from its own stream of
passes, and exact resume, another rank count and data.skip_steps deal the same rows through
a schedule change."""

from __future__ import annotations

import pickle
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from helpers.plans import config, loader_over, write_position_store
from packlm.data.epoch.mixture.allocation import Allocation
from packlm.data.epoch.mixture.sampler import MixtureSampler
from packlm.data.epoch.mixture.streams import (
    SourceStreams,
    source_config,
    source_plan,
    source_seed,
)
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.snap import ParagraphIndex
from packlm.data.skip import StepSkips
from packlm.errors import ConfigError

rng = np.random.default_rng(3)
LENGTHS = rng.integers(1, 40, size=90)
SOURCES = np.repeat([0, 1, 2], [60, 22, 8]).astype(np.int32)  # math: 8 short documents
SCHEDULE = [
    {"step": 0, "shares": {"web": 0.6, "code": 0.3, "math": 0.1}},
    {"step": 5, "shares": {"web": 0.2, "code": 0.3, "math": 0.5}},
]
CFG = config(
    sources=["data/web.jsonl", "data/code", {"path": "m.txt", "name": "math"}],
    mixture_schedule=SCHEDULE,
    window=8,
    stride=6,
    random_offset=True,
    shuffle=True,
    shuffle_documents=True,
    batch_size=4,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("s") / "store"
    return write_position_store(path, LENGTHS, SOURCES.tolist(), ["web", "code", "math"])


def streams(cfg, rows):
    lengths = LENGTHS.astype(np.int64)
    docs = [np.flatnonzero(s == SOURCES) for s in range(3)]
    mine = [source_config(cfg, s) for s in range(len(docs))]
    plan_of = lambda s, p: source_plan(lengths, mine[s], p, docs[s])  # noqa: E731
    return SourceStreams(plan_of, ["web", "code", "math"], Allocation.of(cfg, rows), cfg.seed)


def loader(store, cfg, world=1, rank=0, epoch=0, skips=(), workers=0, may_change=False):
    cfg = replace(cfg, skip_steps=list(skips))
    sampler = MixtureSampler(
        streams(cfg, cfg.batch_size * world), cfg.batch_size, rank=rank, world_size=world,
        epoch=epoch, skip_steps=StepSkips.of(skips),
    )  # fmt: skip
    dl = loader_over(store, cfg, sampler, workers)
    dl.mixture_may_change = may_change
    return dl


def rows(batch, pad_id):
    """(first token, real tokens) of each non-padding row (token id = store position)."""
    ids = batch["input_ids"].numpy()
    real = ids != pad_id
    keep = real.any(axis=1)
    return list(zip(ids[keep, 0].tolist(), real[keep].sum(axis=1).tolist(), strict=True))


def source_of(token: int) -> int:
    return int(SOURCES[np.searchsorted(np.cumsum(LENGTHS), token, side="right")])


def test_each_global_batch_takes_the_allocated_rows_of_each_source(store):
    dl = loader(store, CFG)
    allocation = Allocation.of(CFG, CFG.batch_size)
    batches = list(dl)
    assert len(batches) == dl.sampler.epoch_batches > 5  # the schedule changes inside
    for g, batch in enumerate(batches):
        got = Counter(source_of(first) for first, _ in rows(batch, store.pad_id))
        want = allocation.rows_of(np.asarray([g]))[0]
        assert [got[s] for s in range(3)] == want.tolist()


def test_a_small_source_is_read_pass_after_pass_each_in_a_fresh_order():
    s = streams(CFG, 4)
    n0, n1 = s.pass_samples(2, 0), s.pass_samples(2, 1)
    passes, positions = s.locate(2, np.arange(n0 + n1 + 3))
    assert passes.tolist() == [0] * n0 + [1] * n1 + [2] * 3
    assert positions.tolist() == [*range(n0), *range(n1), 0, 1, 2]
    reads = []
    for p in (0, 1):
        plan = s.plan(2, p)
        _, doc, start, _ = plan.pieces(plan.sample_ids(np.arange(plan.n_samples)))
        assert set(SOURCES[doc].tolist()) == {2}  # the source's own documents only
        reads.append(list(zip(doc.tolist(), start.tolist(), strict=True)))
    assert reads[0] != reads[1]  # another order and other offsets, not one order repeated


def test_exact_resume_across_the_schedule_change_gives_the_uninterrupted_batches(store):
    full = [b["input_ids"] for b in loader(store, CFG, epoch=1)]
    first = loader(store, CFG, epoch=1)
    it = iter(first)
    for _ in range(4):  # the change is at step 5 of the run: inside epoch 1's batches
        next(it)
    state = pickle.loads(pickle.dumps(first.state_dict()))
    assert set(state["mixture_passes"]) == {"web", "code", "math"}
    fresh = loader(store, CFG, epoch=0, workers=2)
    fresh.load_state_dict(state)
    rest = [b["input_ids"] for b in fresh]
    assert len(rest) == len(full) - 4
    assert all((a == b).all() for a, b in zip(rest, full[4:], strict=True))


def test_a_resume_deep_in_a_run_counts_no_pass_before_its_point():
    """The checkpoint keeps where each source's stream is (`resume_point`): the resumed
    run deals the same rows and builds only the passes from there on, not the hundreds a
    small source went through before; a row before the point is found by counting back."""
    g, slots = 400, np.arange(4)
    uninterrupted = streams(CFG, 4)
    want = [uninterrupted.pieces(h, slots) for h in (g, g + 1)]
    point = uninterrupted.resume_point(g)
    assert point["math"][0] > 20  # math: 8 short documents, half of every batch since step 5
    resumed, built = streams(CFG, 4), []
    plan_of = resumed.plan_of
    resumed.plan_of = lambda s, p: built.append((s, p)) or plan_of(s, p)
    resumed.resume_from(pickle.loads(pickle.dumps(point)))
    got = [resumed.pieces(h, slots) for h in (g, g + 1)]
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert resumed.epoch_batches() == uninterrupted.epoch_batches()  # pass 0's, built apart
    for s, name in enumerate(["web", "code", "math"]):
        passes = [p for t, p in built if t == s and p != 0]
        assert all(p >= point[name][0] for p in passes) and len(passes) <= 3
    built.clear()  # batches before the point (a trace of the last steps trained): counted back
    h = g - 20
    assert uninterrupted.allocation.rows_before(np.asarray([h]))[0][2] < point["math"][1]
    assert np.array_equal(resumed.pieces(h, slots), uninterrupted.pieces(h, slots))
    assert 0 < len(built) <= 8 and min(p for _, p in built) >= point["math"][0] - 8
    built.clear()  # an early batch (math's pass 0): counted on from pass 0, not back
    assert np.array_equal(resumed.pieces(6, slots), uninterrupted.pieces(6, slots))
    assert (2, 0) in built and all(p <= 2 for _, p in built)
    for bad in ([0, 5], [-1, 0], [3, 0], "12", [1]):  # one line naming the entry, not a traceback
        with pytest.raises(ConfigError, match=r"mixture_passes\['math'\]"):
            streams(CFG, 4).resume_from({"math": bad})
    beyond = streams(CFG, 4)  # pass 1 said to start far past what pass 0 holds
    beyond.resume_from({"math": [1, 10_000]})
    before_pass0 = 10_000 - beyond.pass_samples(2, 0) - 1  # counted back past pass 0
    with pytest.raises(ConfigError, match="starts past the rows"):
        beyond.locate(2, np.asarray([before_pass0]))


@pytest.mark.parametrize(("before", "after"), [((2, 4), (1, 8)), ((1, 8), (4, 2))])
def test_a_resume_on_another_rank_count_deals_the_same_global_batches(store, before, after):
    def global_rows(world, batch, stop=None, state=None):
        cfg = replace(CFG, batch_size=batch)
        dls = [loader(store, cfg, world, rank) for rank in range(world)]
        for dl in dls:
            if state is not None:
                dl.load_state_dict(state)
        iters = [iter(dl) for dl in dls]
        per_rank = [list(it) if stop is None else [next(it) for _ in range(stop)] for it in iters]
        out = [
            sorted(r for b in batches for r in rows(b, store.pad_id))
            for batches in zip(*per_rank, strict=True)
        ]
        return out, dls[0]

    whole, _ = global_rows(1, 8)
    done, dl = global_rows(*before, stop=3)
    rest, _ = global_rows(*after, state=pickle.loads(pickle.dumps(dl.state_dict())))
    assert done + rest == whole


def test_skipped_steps_pass_over_their_rows_across_the_schedule_change(store):
    whole = [b["input_ids"] for b in loader(store, CFG)]
    skipping = [b["input_ids"] for b in loader(store, CFG, skips=(4, 5))]
    kept = whole[:4] + whole[6:]
    assert len(skipping) == len(kept)
    assert all((a == b).all() for a, b in zip(skipping, kept, strict=True))


def test_a_resume_under_another_schedule_is_refused_unless_asked_for(store):
    first = loader(store, CFG)
    it = iter(first)
    next(it)
    state = first.state_dict()
    changed = replace(CFG, mixture_schedule=[SCHEDULE[0], {**SCHEDULE[1], "step": 9}])
    with pytest.raises(ConfigError, match="data.mixture_schedule.*mixture_change_on_resume"):
        loader(store, changed).load_state_dict(state)
    allowed = loader(store, changed, may_change=True)
    allowed.load_state_dict(state)
    assert allowed.sampler.position.batch == 1


def test_a_resume_with_another_global_batch_is_refused(store):
    first = loader(store, CFG)
    it = iter(first)
    next(it)
    with pytest.raises(ConfigError, match="data.batch_size.*global batch"):
        loader(store, replace(CFG, batch_size=3)).load_state_dict(first.state_dict())


PLAN_CASES = {
    "document": {},
    "none_drop": dict(packing="none", tail="drop"),
    "stream_cover_bos": dict(packing="stream", tail="cover", bos=True),
    "best_fit_grouped": dict(pack_size=17, pack_strategy="best_fit", pack_buffer=8),
    "snap_paragraph": dict(snap="paragraph", snap_tolerance=3),
}


@pytest.mark.parametrize("case", PLAN_CASES)
def test_a_pass_is_the_ordinary_plan_of_the_source_alone(case):
    """Every packing mode, window, stride, offset, tail and snap rule holds inside a source:
    its pass p is `build_plan` over the whole store with the other sources' weight 0."""
    cfg = replace(CFG, **PLAN_CASES[case])
    lengths = LENGTHS.astype(np.int64)
    groups = SOURCES if "grouped" in case else None  # data.group_by=source
    starts = np.sort(np.random.default_rng(0).choice(int(lengths.sum()), 200, replace=False))
    starts = starts if cfg.snap == "paragraph" else None
    index = None if starts is None else ParagraphIndex.of(starts, lengths, cfg.bos)
    for s in range(3):
        seed = source_seed(cfg.seed, ["web", "code", "math"][s])
        weights = [float(k == s) for k in range(3)]
        for p in (0, 3):
            mine = source_plan(
                lengths, source_config(cfg, s), p, np.flatnonzero(s == SOURCES), groups, index
            )
            whole = build_plan(
                lengths, replace(cfg, seed=seed), p, SOURCES, weights, groups, starts
            )
            ids = np.arange(whole.n_samples)
            assert mine.n_samples == whole.n_samples
            for a, b in zip(
                mine.pieces(mine.sample_ids(ids)), whole.pieces(whole.sample_ids(ids)), strict=True
            ):
                assert np.array_equal(a, b)


def test_a_pass_keeps_each_group_of_the_source_adjacent():
    """data.group_by=directory inside a source: a group's documents stay together."""
    cfg = replace(CFG, group_by="directory")
    groups, docs = np.arange(len(LENGTHS)) // 5, np.flatnonzero(SOURCES == 0)
    for p in range(3):
        plan = source_plan(LENGTHS.astype(np.int64), source_config(cfg, 0), p, docs, groups)
        seen = groups[plan.order]  # [n] group of each epoch document, in epoch order
        runs = seen[np.r_[True, seen[1:] != seen[:-1]]]
        assert len(runs) == len(set(runs.tolist())) == len(np.unique(groups[docs]))  # one run each


def test_a_source_without_documents_is_an_error_only_when_its_share_asks_for_rows():
    lengths = np.asarray([50, 40], dtype=np.int64)  # math: no training document
    sources = np.asarray([0, 1])
    cfg = CFG
    docs = [np.flatnonzero(sources == s) for s in range(3)]
    mine = [source_config(cfg, s) for s in range(len(docs))]
    plan_of = lambda s, p: source_plan(lengths, mine[s], p, docs[s])  # noqa: E731
    names = ["web", "code", "math"]
    idle = replace(cfg, mixture_schedule=[{"step": 0, "shares": {"web": 0.5, "code": 0.5}}])
    fine = SourceStreams(plan_of, names, Allocation.of(idle, 4), cfg.seed)
    assert fine.pieces(3, np.arange(4)).shape[1] >= 4
    fine.check()
    asked = SourceStreams(plan_of, names, Allocation.of(CFG, 4), cfg.seed)
    with pytest.raises(ConfigError, match="source 'math' has a share but no training document"):
        asked.check()  # what EpochPlans.streams runs before any batch
    with pytest.raises(ConfigError, match="source 'math' has a share but no training document"):
        for g in range(4):
            asked.pieces(g, np.arange(4))
