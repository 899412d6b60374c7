"""`packlm.trace`: a step traced from the config alone is exactly what the loaders yielded."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers.plans import write_position_store
from packlm.commands.trace import Schedule, Tracer, main, parse_doc_id
from packlm.commands.trace.cli import render
from packlm.config.data import DataConfig
from packlm.data.epoch.curriculum import Position
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset, plan_signature
from packlm.data.epoch.mixture.sampler import MixtureSampler
from packlm.data.epoch.sampler import PlanSampler
from packlm.data.plans import EpochPlans
from packlm.data.skip import StepSkips
from packlm.data.store.prepared import PreparedData

LENGTHS = np.random.default_rng(4).integers(1, 40, size=70)
WORLD, WORKERS, EPOCHS = 2, 2, 3
BASE = dict(window=8, stride=5, batch_size=3, shuffle=True, shuffle_documents=True, seed=11)
CASES = {
    "document": dict(sources=[{"path": "a", "weight": 1.5}, {"path": "b", "weight": 0.5}]),
    "curriculum": dict(
        curriculum=[{"window": 4, "stride": 3, "until": 300}, {"window": 8, "stride": 5}]
    ),
    "best_fit_grouped_stream_bos": dict(
        packing="stream", pack_size=9, pack_strategy="best_fit", group_by="source", bos=True
    ),
    "snap_cover": dict(snap="document", snap_tolerance=3, tail="cover", packing="none"),
    "mixture_schedule": dict(
        sources=["a", "b"],
        mixture_schedule=[
            {"step": 0, "shares": {"a": 0.8, "b": 0.2}},
            {"step": 9, "shares": {"b": 1}},
        ],
        mixture_interpolation="linear",
    ),
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    names = ["a", "b"]
    train = write_position_store(root / "train", LENGTHS, (np.arange(70) % 2).tolist(), names)
    val = write_position_store(root / "val", LENGTHS[:5])
    return PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)


def yielded(plans: EpochPlans, rank: int) -> list[list[dict]]:
    """Every batch rank `rank` of WORLD gets, epoch by epoch, through 2-worker PlanDataLoaders
    (one loader per epoch sharing the position, as the DataModule reloads them)."""
    cfg, store = plans.data, plans.store("train")
    curriculum = plans.phases if cfg.curriculum else None
    position, out = Position(), []
    for epoch in range(EPOCHS):
        skips = StepSkips.of(cfg.skip_steps, 2)
        if plans.mixture:
            sampler = MixtureSampler(
                plans.streams(cfg.batch_size * WORLD, 2), cfg.batch_size, rank=rank,
                world_size=WORLD, epoch=epoch, position=position, skip_steps=skips,
            )  # fmt: skip
        else:
            sampler = PlanSampler(
                lambda e, p=None: plans.plan(e, "train", p), cfg.batch_size, rank, WORLD, epoch,
                phases=curriculum, position=position, skip_steps=skips,
            )  # fmt: skip
        dataset = WindowDataset(
            store.path, cfg.window, store.pad_id, store.eos_id if cfg.bos else None
        )
        loader = PlanDataLoader(
            dataset, sampler, cfg.packing, plan_signature(cfg, store, None),
            num_workers=WORKERS, persistent_workers=False,
        )  # fmt: skip
        sampler.set_epoch(epoch)
        out.append([{k: v.numpy() for k, v in b.items()} for b in loader])
    return out


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 2 workers on a small CI
@pytest.mark.parametrize("case", CASES)
def test_random_steps_traced_from_the_config_equal_the_loaders_batches(prepared, case):
    data = DataConfig.from_mapping({**BASE, **CASES[case]}).validate()
    plans = EpochPlans(prepared=prepared, data=data, progress=False)
    tracer = Tracer(plans, Schedule(world_size=WORLD, accumulate=2))
    batches = [yielded(plans, r) for r in range(WORLD)]
    per_epoch = [len(e) for e in batches[0]]
    assert per_epoch == [len(e) for e in batches[1]]
    # every step maps to its micro-batches, in order, covering the 3 epochs exactly once
    steps = sum(-(-n // 2) for n in per_epoch)
    flat = [eb for s in range(steps) for eb in tracer.step_batches(s)]
    assert flat == [(e, b) for e, n in enumerate(per_epoch) for b in range(n)]
    rng = np.random.default_rng(0)
    for step in rng.choice(steps, size=min(50, steps), replace=False).tolist():
        for epoch, b in tracer.step_batches(step):
            trace = tracer.batch(epoch, b)
            assert trace["step"] == step
            seen = set()
            for row in trace["rows"]:
                got = batches[row["rank"]][epoch][b]
                assert row["input_ids"] == got["input_ids"][row["row"]].tolist()
                assert row["supervised"] == int((got["labels"][row["row"]] != -100).sum())
                assert sum(p["targets"] for p in row["pieces"]) == row["supervised"]
                seen.add((row["rank"], row["row"]))
            for r in range(WORLD):  # rows the trace has not are PAD rows
                for k in range(data.batch_size):
                    if (r, k) not in seen:
                        assert (batches[r][epoch][b]["segment_ids"][k] == -1).all()
    assert steps >= 50  # the 50 random steps are distinct


def test_a_piece_names_its_document_source_and_span(prepared):
    data = DataConfig.from_mapping({**BASE, **CASES["document"]}).validate()
    tracer = Tracer(EpochPlans(prepared=prepared, data=data, progress=False), Schedule())
    store = tracer.plans.store("train")
    for row in tracer.batch(1, 2)["rows"]:
        column = 0
        for p in row["pieces"]:
            d, (lo, hi) = p["document"], p["token_span"]
            assert p["source"] == ["a", "b"][int(store.doc_sources[d])]
            assert p["doc_id"] == store.doc_id(d)
            # the position store's token ids are store positions
            expected = list(range(int(store.doc_offsets[d]) + lo, int(store.doc_offsets[d]) + hi))
            assert row["input_ids"][column : column + hi - lo] == expected[: data.window - column]
            column += hi - lo


def test_doc_ids_parse_to_path_and_record():
    assert parse_doc_id("0:data/x.jsonl:12") == {"path": "data/x.jsonl", "record": 12}
    assert parse_doc_id("1:default/a.txt") == {"path": "default/a.txt", "record": None}
    assert parse_doc_id("0:t.txt@0-100:3") == {"path": "t.txt@0-100", "record": 3}


def test_command_line_prints_json_and_text_and_refuses_unknown_keys(prepared, monkeypatch, capsys):
    import packlm.commands.trace.cli as trace_cli

    data = DataConfig.from_mapping({**BASE, **CASES["document"]}).validate()
    tracer = Tracer(EpochPlans(prepared=prepared, data=data, progress=False), Schedule(2, 2))
    monkeypatch.setattr(trace_cli, "tracer_of", lambda path, world, step=None: tracer)
    assert main(["run", "step=3", "rank=1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(t["epoch"], t["batch"]) for t in out] == tracer.step_batches(3)
    assert all(r["rank"] == 1 for t in out for r in t["rows"])
    assert main(["run", "epoch=1", "batch=0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("step ") and "epoch 1, global batch 0" in text and "doc " in text
    with pytest.raises(SystemExit) as e:
        main(["run", "stepp=0"])
    assert e.value.code == 2 and "stepp: unknown argument" in capsys.readouterr().err


def test_skipped_steps_of_a_mixture_trace_to_the_batches_trained(prepared):
    """data.skip_steps across a schedule change: logged step k is the plan step the trace names."""
    mixture = CASES["mixture_schedule"]
    data = DataConfig.from_mapping({**BASE, **mixture, "skip_steps": [4, 11]}).validate()
    plans = EpochPlans(prepared=prepared, data=data, progress=False)
    tracer = Tracer(plans, Schedule())
    store = plans.store("train")
    sampler = MixtureSampler(
        plans.streams(data.batch_size), data.batch_size, skip_steps=StepSkips.of([4, 11])
    )
    dataset = WindowDataset(store.path, data.window, store.pad_id)
    loader = PlanDataLoader(dataset, sampler, data.packing, plan_signature(data, store, None))
    trained = [b["input_ids"].numpy() for b in loader]
    assert len(trained) == tracer.epoch_batches(0) - 2
    for step in (3, 4, 5, 10, 11, 12):
        ((epoch, b),) = tracer.step_batches(step)
        assert b == step + (step >= 4) + (step + 1 >= 11)  # the plan batch after the skips
        trace = tracer.batch(epoch, b)
        assert [r["input_ids"] for r in trace["rows"]] == trained[step].tolist()
        assert {r["mixture"]["source"] for r in trace["rows"]} <= {"a", "b"}
        text = render([trace])
        assert "  mixture: shares a " in text and " pass " in text
