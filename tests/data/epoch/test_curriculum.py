"""data.curriculum: the switch rule, counting, ranks x workers, exact resume across a switch,
config errors. The store's token at position p is p, so a row names the sample it read."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest

from helpers.plans import PAD, config, loader_over, position_store, write_position_store
from packlm.config.data import DataConfig
from packlm.data.epoch.collate import collate
from packlm.data.epoch.curriculum import (
    Phase,
    Position,
    expected_batches,
    expected_tokens,
    phase_at,
    phase_config,
    phases_of,
    sample_targets,
)
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import PlanSampler
from packlm.errors import ConfigError

LENGTHS = np.random.default_rng(3).integers(1, 50, size=120)
PHASES = [{"window": 4, "stride": 4, "until": 700}, {"window": 8, "stride": 6, "until": 1900}]
PHASES += [{"window": 16, "stride": 8}]
SHUFFLED = dict(shuffle=True, shuffle_documents=True, random_offset=True, batch_size=3)


def curriculum_config(**overrides) -> DataConfig:
    return config(**{"curriculum": PHASES, **SHUFFLED, **overrides})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_position_store(tmp_path_factory.mktemp("s") / "store", LENGTHS)


def loader(store, cfg, rank=0, world=1, workers=0, epoch=0, position=None) -> PlanDataLoader:
    phases = phases_of(cfg)
    lengths = np.diff(store.doc_offsets)
    sampler = PlanSampler(
        lambda e, p: build_plan(lengths, phase_config(cfg, phases[p]), e),
        cfg.batch_size, rank, world, epoch, phases=phases, position=position,
    )  # fmt: skip
    return loader_over(store, cfg, sampler, workers)


def epochs(store, cfg, n_epochs=3, **kw) -> list[list[dict]]:
    """Every batch of n_epochs, epoch by epoch, one loader per epoch sharing the position
    (as the DataModule reloads its dataloader every epoch)."""
    position, out = Position(), []
    for e in range(n_epochs):
        dl = loader(store, cfg, epoch=e, position=position, **kw)
        dl.sampler.set_epoch(e)
        out.append(list(dl))
        assert len(out[-1]) == len(dl)  # Lightning's length of the epoch is exact
    return out


@pytest.mark.parametrize("packing", ["none", "document", "stream"])
@pytest.mark.parametrize("bos", [False, True])
def test_counted_targets_equal_the_collated_labels(packing, bos):
    cfg = config(window=7, stride=5, packing=packing, bos=bos, **SHUFFLED)
    lengths = LENGTHS + 1 if bos else LENGTHS  # the plan counts the BOS
    plan = build_plan(lengths, cfg, 2)
    dataset = WindowDataset("unused", 7, PAD, bos_id=-3 if bos else None)
    dataset._store = position_store(LENGTHS)
    counted = sample_targets(plan, np.arange(plan.n_samples))
    sampler = PlanSampler(lambda e: plan, 1, epoch=2)
    labelled = [int((collate(dataset[b], packing)["labels"] != -100).sum()) for b in sampler]
    assert counted.tolist() == labelled


@pytest.mark.parametrize("world", [1, 2])
def test_the_switch_is_the_first_global_batch_after_until_targets(store, world):
    cfg = curriculum_config()
    ranks = [epochs(store, cfg, rank=r, world=world) for r in range(world)]
    counted, windows = 0, []
    for e, batches in enumerate(ranks[0]):
        for b in range(len(batches)):
            window = {rank[e][b]["input_ids"].shape[1] for rank in ranks}
            assert len(window) == 1  # every rank switches at the same batch
            expected = phases_of(cfg)[phase_at(phases_of(cfg), counted)].window
            assert window == {expected}, (e, b, counted)
            windows.append((e, expected))
            counted += sum(int((rank[e][b]["labels"] != -100).sum()) for rank in ranks)
    # every phase ran, and both switches came mid-epoch
    assert [w for w in (4, 8, 16) if (0, w) in windows or (1, w) in windows] == [4, 8, 16]
    switches = [i for i in range(1, len(windows)) if windows[i][1] != windows[i - 1][1]]
    assert len(switches) == 2
    assert all(windows[i][0] == windows[i - 1][0] for i in switches)


def test_the_batches_are_a_function_of_seed_and_epoch(store):
    cfg = curriculum_config()
    a, b = epochs(store, cfg), epochs(store, cfg)
    assert all(
        (x["input_ids"] == y["input_ids"]).all() for ea, eb in zip(a, b, strict=True)
        for x, y in zip(ea, eb, strict=True)
    )  # fmt: skip
    other = epochs(store, curriculum_config(seed=7))
    assert any(
        x["input_ids"].shape != y["input_ids"].shape or (x["input_ids"] != y["input_ids"]).any()
        for x, y in zip(a[0], other[0], strict=False)
    )


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 2 workers on a 2-core CI
@pytest.mark.parametrize("workers", [0, 2])
def test_ranks_and_workers_yield_each_sample_of_a_phase_exactly_once(store, workers):
    cfg = curriculum_config(batch_size=2)
    world, lengths, phases = 3, np.diff(store.doc_offsets), phases_of(cfg)
    first = loader(store, cfg, world=world)
    segments = first.sampler.segments()
    assert [s.phase for s in segments] == [0, 1, 2]  # the first epoch switches twice
    seen = {s.phase: Counter() for s in segments}
    for rank in range(world):
        dl = loader(store, cfg, rank, world, workers)
        batches = list(dl)
        assert len(batches) == len(first)
        for s in segments:
            width = phases[s.phase].window
            part = [b for b in batches if b["input_ids"].shape[1] == width]
            assert len(part) == s.batches
            seen[s.phase].update(
                (int(r[0]), int((r != store.pad_id).sum())) for b in part for r in b["input_ids"].numpy()
                if (r != store.pad_id).any()
            )  # fmt: skip
    for s in segments:
        plan = build_plan(lengths, phase_config(cfg, phases[s.phase]), 0)
        positions = np.arange(s.start, min(plan.n_samples, s.start + s.batches * world * 2))
        _, g, r = plan.windows(plan.sample_ids(positions))
        stream = np.concatenate(
            [np.arange(store.doc_offsets[d], store.doc_offsets[d + 1]) for d in plan.order]
        )
        planned = Counter(
            zip(stream[g].tolist(), np.minimum(r, phases[s.phase].window).tolist(), strict=True)
        )
        assert seen[s.phase] == planned


def stopped_at(store, cfg, epoch: int, taken: int, workers: int) -> dict:
    """The loader state of a run stopped after `taken` batches of `epoch`."""
    position = Position()
    for e in range(epoch + 1):
        dl = loader(store, cfg, epoch=e, position=position, workers=workers)
        dl.sampler.set_epoch(e)
        it = iter(dl)
        for _ in range(taken if e == epoch else len(dl)):
            next(it)
    return pickle.loads(pickle.dumps(dl.state_dict()))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_at_any_batch_around_a_switch_continues_exactly(store, workers):
    cfg = curriculum_config()
    full = epochs(store, cfg, n_epochs=2)
    flat = [(e, b) for e in range(2) for b in range(len(full[e]))]
    widths = [full[e][b]["input_ids"].shape[1] for e, b in flat]
    switches = [i for i in range(1, len(widths)) if widths[i] != widths[i - 1]]
    stops = {i + d for i in switches for d in (-1, 0, 1)} | {len(full[0]) - 1, len(full[0])}
    for stop in sorted(stops):
        epoch, taken = flat[stop]  # stop after `taken` batches of `epoch`
        state = stopped_at(store, cfg, epoch, taken, workers)
        position = Position()  # a new process: the DataModule restores it, then the loader
        position.set(Position(**{k: state[k] for k in vars(position)}))
        resumed = []
        for e in range(epoch, 2):
            dl = loader(store, cfg, epoch=e, position=position, workers=workers)
            assert len(dl) == len(full[e])  # the length Lightning reads before the loader state
            if e == epoch:
                dl.load_state_dict(state)
            dl.sampler.set_epoch(e)
            resumed += list(dl)
        expected = [full[e][b] for e, b in flat[stop:]]
        assert len(resumed) == len(expected), stop
        for x, y in zip(resumed, expected, strict=True):
            assert x["input_ids"].shape == y["input_ids"].shape, stop
            assert (x["input_ids"] == y["input_ids"]).all(), stop


def test_a_switch_cannot_be_resumed_with_another_curriculum(store):
    state = loader(store, curriculum_config()).state_dict()
    other = PHASES[:1] + [{"window": 16, "stride": 8}]
    with pytest.raises(ConfigError, match=r"data\.curriculum: "):
        loader(store, curriculum_config(curriculum=other)).load_state_dict(state)


@pytest.mark.parametrize(
    ("phases", "message"),
    [
        ([], r"data\.curriculum=\[\]: a list"),
        ([{"window": 4, "until": 10}, {"window": 0}], r"data\.curriculum\[1\]\.window=0"),
        ([{"window": 4, "stride": -1, "until": 9}, {"window": 8}], r"data\.curriculum\[0\]\.stride"),
        ([{"window": 4}, {"window": 8}], r"data\.curriculum\[0\]\.until=None"),
        ([{"window": 4, "until": 10}, {"window": 8, "until": 10}, {"window": 8}],
         r"data\.curriculum\[1\]\.until=10: must be greater"),
        ([{"window": 4, "until": 10}, {"window": 8, "until": 20}], r"data\.curriculum\[1\]\.until=20: the last"),
        ([{"window": 4, "until": 10}, {"window": 8, "size": 2}], r"data\.curriculum\[1\]: unknown keys \['size'\]"),
        ([{"window": 4, "until": 10}, {"window": 512}], r"data\.curriculum\[1\]\.window=512: longer"),
        ([{"window": 4, "stride": 3, "until": 10}, {"window": 8}], r"data\.curriculum\[0\]\.stride=3: data\.snap_tol"),
        ([4, {"window": 8}], r"data\.curriculum\[0\]=4"),
    ],
)  # fmt: skip
def test_config_errors_name_the_phase_and_key(phases, message):
    with pytest.raises(ConfigError, match=message):
        DataConfig(curriculum=phases, snap="document", snap_tolerance=3).validate(model_context=256)


def test_the_last_phase_is_the_run_window_and_the_model_covers_every_phase():
    cfg = DataConfig(curriculum=[{"window": 64, "until": 5}, {"window": 128, "stride": 96}])
    assert (cfg.validate(128).window, cfg.stride) == (128, 96)  # validation uses the last phase
    assert phases_of(cfg) == [Phase(64, 64, 5), Phase(128, 96, None)]
    with pytest.raises(ConfigError, match=r"data\.curriculum\[0\]\.window=64: data\.pack_size"):
        DataConfig(curriculum=[{"window": 64, "until": 5}, {"window": 8}], pack_size=20).validate()


@pytest.mark.parametrize("key", ["window", "stride"])
def test_a_window_or_stride_beside_a_curriculum_is_an_error_not_ignored(key):
    phases = [{"window": 32, "until": 5}, {"window": 64}]
    with pytest.raises(ConfigError, match=rf"data\.{key}=256: data\.curriculum sets the {key}"):
        DataConfig(curriculum=phases, **{key: 256}).validate(model_context=256)
    same = DataConfig(curriculum=phases, window=64, stride=64).validate(model_context=256)
    assert (same.window, same.stride) == (64, 64)  # the last phase's own values are fine
    assert same.validate(model_context=256).window == 64  # and validating again changes nothing


def test_expected_tokens_follow_the_phases():
    phases = [Phase(4, 4, 100), Phase(8, 8, None)]
    assert expected_tokens(phases, [10.0, 40.0], 5) == 50
    assert expected_tokens(phases, [10.0, 40.0], 10) == 100
    assert expected_tokens(phases, [10.0, 40.0], 12) == 180
    assert [phase_at(phases, t) for t in (0, 99, 100, 10**9)] == [0, 0, 1, 1]
    for batches in (0, 3, 10, 12, 30):
        tokens = expected_tokens(phases, [10.0, 40.0], batches)
        assert expected_batches(phases, [10.0, 40.0], tokens) == pytest.approx(batches)
