"""data.skip_documents / data.skip_steps: what is skipped is never trained, the rest is the
un-skipped run's batches exactly (ranks x workers, resume, trace)."""

from __future__ import annotations

import logging

import lightning as L
import numpy as np
import pytest

from helpers.lightning_doubles import Capture, Recorder, SaveAt
from packlm.commands.trace import Schedule, Tracer
from packlm.config.data import DataConfig
from packlm.data.datamodule import PackedDataModule
from packlm.data.epoch.curriculum import Position
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset, plan_signature
from packlm.data.epoch.sampler import PlanSampler
from packlm.data.plans import EpochPlans
from packlm.data.skip import StepSkips, document_counts
from packlm.data.store.prepared import PreparedData
from packlm.data.store.token_store import write_store
from packlm.errors import ConfigError

LENGTHS = np.random.default_rng(7).integers(1, 30, size=60)
STARTS = np.concatenate([[0], np.cumsum(LENGTHS)])
IDS = [f"{d % 2}:data/part{d % 3}.jsonl:{d}" for d in range(len(LENGTHS))]
BASE = dict(window=8, stride=5, batch_size=3, seed=3, sources=["a", "b"])
WORLD, EPOCHS = 2, 3


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Stores whose token ids are their store positions (a label names the token it is)."""
    root = tmp_path_factory.mktemp("stores")
    vocab = int(STARTS[-1]) + 2
    docs = [np.arange(STARTS[i], STARTS[i + 1]) for i in range(len(LENGTHS))]
    sources = [d % 2 for d in range(len(LENGTHS))]
    train = write_store(root / "train", docs, vocab, vocab - 2, vocab - 1, IDS, sources, ["a", "b"])
    val = write_store(root / "val", docs[:3], vocab, vocab - 2, vocab - 1)
    return PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)


def plans_of(prepared, **keys) -> EpochPlans:
    return EpochPlans(
        prepared=prepared, data=DataConfig.from_mapping({**BASE, **keys}), progress=False
    )


def loader(plans, rank, epoch, position, accumulate=1, workers=0, world=WORLD) -> PlanDataLoader:
    """Rank `rank`'s loader of one epoch, as the DataModule builds it (position shared)."""
    cfg, store = plans.data, plans.store("train")
    sampler = PlanSampler(
        lambda e, p=None: plans.plan(e, "train", p), cfg.batch_size, rank, world, epoch,
        phases=plans.phases if cfg.curriculum else None,
        position=position, skip_documents=plans.skipped_documents(),
        skip_steps=StepSkips.of(cfg.skip_steps, accumulate),
    )  # fmt: skip
    sampler.set_epoch(epoch)
    dataset = WindowDataset(store.path, cfg.window, store.pad_id)
    return PlanDataLoader(
        dataset, sampler, cfg.packing, plan_signature(cfg, store, None),
        num_workers=workers, persistent_workers=False,
    )  # fmt: skip


def run(plans, rank, accumulate=1, workers=0) -> list[list[dict]]:
    """Every batch rank `rank` gets, epoch by epoch; each epoch's len() checked against it."""
    position, out = Position(), []
    for epoch in range(EPOCHS):
        dl = loader(plans, rank, epoch, position, accumulate, workers)
        n = len(dl.sampler)
        out.append([{k: v.numpy() for k, v in b.items()} for b in dl])
        assert len(out[-1]) == n
    return out


def steps_of(epochs: list[list[dict]], accumulate: int) -> list[list[dict]]:
    """The optimizer steps as Lightning groups the batches: A per step, per epoch."""
    return [e[i : i + accumulate] for e in epochs for i in range(0, len(e), accumulate)]


def in_documents(tokens: np.ndarray, docs: list[int]) -> np.ndarray:
    """Whether each token id (a store position) belongs to one of the documents."""
    return np.isin(np.searchsorted(STARTS, tokens, side="right") - 1, docs) & (tokens < STARTS[-1])


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 2 workers on a small CI
@pytest.mark.parametrize("packing", ["document", "stream"])
def test_skipped_documents_are_never_supervised_and_everything_else_is_unchanged(prepared, packing):
    skip = np.flatnonzero(LENGTHS <= 6)[:3].tolist()  # short: packed after other documents
    keys = dict(packing=packing, pack_size=20)
    base, skipped = plans_of(prepared, **keys), plans_of(prepared, skip_documents=skip, **keys)
    dropped = crossing = 0
    for rank in range(WORLD):  # 2 ranks x 2 workers
        for e0, e1 in zip(run(base, rank, workers=2), run(skipped, rank, workers=2), strict=True):
            assert len(e0) == len(e1)
            for b0, b1 in zip(e0, e1, strict=True):
                for key in ("input_ids", "segment_ids", "position_ids", "source_ids"):
                    assert (b0[key] == b1[key]).all()
                lab = b0["labels"]
                hit = in_documents(b0["input_ids"], skip) | in_documents(lab, skip) & (lab >= 0)
                assert (b1["labels"] == np.where(hit, -100, lab)).all()
                supervised = b1["labels"] != -100
                assert not in_documents(b1["labels"][supervised], skip).any()
                assert not in_documents(b1["input_ids"][supervised], skip).any()
                dropped += int((hit & (lab != -100)).sum())
                crossing += int((~in_documents(b0["input_ids"], skip) & hit & (lab >= 0)).sum())
    assert dropped > 0  # the documents were read, and their labels went
    # stream: the target across into a skipped document went too (document: there is none)
    assert (crossing > 0) == (packing == "stream")


CURRICULUM = dict(curriculum=[{"window": 4, "stride": 3, "until": 300}, {"window": 8, "stride": 5}])


@pytest.mark.parametrize("keys", [{}, CURRICULUM], ids=["plain", "curriculum"])
def test_skip_steps_leave_out_exactly_those_steps_batches(prepared, keys):
    acc = 2
    p1 = len(steps_of(run(plans_of(prepared, **keys), 0, acc)[:1], acc))  # epoch 0's steps
    skip = [3, p1 - 1, p1, p1 + 4]  # mid-epoch, epoch 0's last (short?) step, epoch 1's first
    for rank in range(WORLD):
        base = steps_of(run(plans_of(prepared, **keys), rank, acc), acc)
        got = steps_of(run(plans_of(prepared, skip_steps=skip, **keys), rank, acc), acc)
        kept = [s for i, s in enumerate(base) if i not in skip]
        assert len(got) == len(base) - len(skip)
        for s0, s1 in zip(kept, got, strict=True):
            assert [b["input_ids"].tolist() for b in s0] == [b["input_ids"].tolist() for b in s1]
        # the step logged as 3 trains what step 4 would have
        assert got[3][0]["input_ids"].tolist() == base[4][0]["input_ids"].tolist()


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("packing", ["document", "stream"])
def test_the_trace_of_a_skipping_run_is_what_its_loaders_yielded(prepared, packing):
    acc, short = 2, np.flatnonzero(LENGTHS <= 6)[:2].tolist()
    skip = [IDS[short[0]].partition(":")[2], short[1], 20]  # an id as the trace prints it
    plans = plans_of(
        prepared, skip_documents=skip, skip_steps=[2, 3, 9], packing=packing, pack_size=20
    )
    steps = [steps_of(run(plans, r, acc, workers=2), acc) for r in range(WORLD)]
    tracer = Tracer(plans, Schedule(world_size=WORLD, accumulate=acc))
    skipped_pieces = 0
    for step in range(len(steps[0])):
        where = tracer.step_batches(step)
        assert len(where) == len(steps[0][step])
        for i, (epoch, b) in enumerate(where):
            trace = tracer.batch(epoch, b)
            assert trace["step"] == step and not trace["skipped_step"]
            assert trace["plan_step"] == step + (step >= 2) * 2 + (step + 2 >= 9)
            for row in trace["rows"]:
                got = steps[row["rank"]][step][i]
                assert row["input_ids"] == got["input_ids"][row["row"]].tolist()
                assert row["supervised"] == int((got["labels"][row["row"]] != -100).sum())
                assert sum(p["targets"] for p in row["pieces"]) == row["supervised"]
                skipped_pieces += sum(p["skipped"] for p in row["pieces"])
    assert skipped_pieces > 0
    left_out = tracer.batch(*Tracer(plans_of(prepared), Schedule(WORLD, acc)).step_batches(2)[0])
    assert left_out["skipped_step"] and left_out["step"] is None


def test_a_resume_reproduces_and_may_add_a_later_skip(prepared):
    acc, cut = 2, (1, 4)  # the checkpoint: epoch 1 after 4 global batches (2 steps)
    full = {
        tuple(s): run(plans_of(prepared, skip_steps=s, skip_documents=[5]), 1, acc)
        for s in ([3], [3, 40])
    }
    first, resumed = [3], [3, 40]  # a resume adds a skip past the checkpoint
    plans, position = plans_of(prepared, skip_steps=first, skip_documents=[5]), Position()
    for epoch in range(cut[0] + 1):
        dl = loader(plans, 1, epoch, position, acc)
        for i, _ in enumerate(dl):
            if (epoch, i + 1) == cut:
                break
    state = dl.state_dict()
    later = plans_of(prepared, skip_steps=resumed, skip_documents=[5])
    position, rest = Position(), []
    for epoch in range(cut[0], EPOCHS):
        dl = loader(later, 1, epoch, position, acc)
        if epoch == cut[0]:
            dl.load_state_dict(state)
        rest.append([b["input_ids"].tolist() for b in dl])
    want = full[(3, 40)]
    assert rest[0] == [b["input_ids"].tolist() for b in want[cut[0]][cut[1] :]]
    assert rest[1:] == [[b["input_ids"].tolist() for b in e] for e in want[cut[0] + 1 :]]
    # the added skip (a step of epoch 2) changed the run
    assert sum(map(len, full[(3,)])) == sum(map(len, full[(3, 40)])) + 2


def test_a_resume_with_another_global_batch_is_refused(prepared):
    plans = plans_of(prepared, skip_steps=[1])
    dl = loader(plans, 0, 0, Position())
    next(iter(dl))
    state = dl.state_dict()
    other = loader(plans, 0, 0, Position(), world=1)
    with pytest.raises(ConfigError, match="data.skip_steps"):
        other.load_state_dict(state)


@pytest.mark.parametrize(
    "keys, match",
    [
        (dict(skip_steps=[-1]), r"data.skip_steps\[0\]=-1"),
        (dict(skip_steps=[3, 3]), r"data.skip_steps: steps \[3\] are listed twice"),
        (dict(skip_steps=["7"]), r"data.skip_steps\[0\]"),
        (dict(skip_documents=[-2]), r"data.skip_documents\[0\]=-2"),
        (dict(skip_documents=[""]), r"data.skip_documents\[0\]"),
        (dict(skip_documents=[True]), r"data.skip_documents\[0\]"),
    ],
)
def test_invalid_skips_fail_before_any_work(keys, match):
    with pytest.raises(ConfigError, match=match):
        DataConfig.from_mapping({**BASE, **keys})


@pytest.mark.parametrize("entry", [60, "data/part0.jsonl:1", "9:data/part1.jsonl:1"])
def test_an_unknown_document_fails_right_after_the_store_opens(prepared, entry):
    with pytest.raises(ConfigError, match="data.skip_documents"):
        plans_of(prepared, skip_documents=[entry]).skipped_documents()


def test_documents_are_named_by_index_or_by_the_id_the_trace_prints(prepared):
    plans = plans_of(prepared, skip_documents=[8, "data/part1.jsonl:7", "0:data/part2.jsonl:2"])
    assert plans.skipped_documents().tolist() == [2, 7, 8]


@pytest.mark.parametrize(
    "keys",
    [
        dict(packing="stream", pack_size=20),
        dict(packing="stream"),  # one sequence: the whole epoch
        dict(packing="document", tail="cover", snap="document", snap_tolerance=3),
        dict(packing="none", tail="drop", window=16, stride=7),
        dict(packing="document", pack_size=40, pack_strategy="best_fit", shuffle=False),
    ],
)
def test_document_counts_are_the_samples_that_read_them(prepared, keys):
    plans = plans_of(prepared, **keys)
    for epoch in range(3):
        plan = plans.plan(epoch)
        row, doc, _, length = plan.pieces(np.arange(plan.n_samples))
        for docs in (np.array([4, 17]), np.flatnonzero(LENGTHS <= 6), np.arange(0, 60, 7)):
            hit = np.isin(doc, docs)
            want = (len(np.unique(row[hit])), int(length[hit].sum()))
            assert document_counts(plan, docs) == want
            assert want[0] > 0


def test_the_trace_refuses_skip_steps_under_limit_train_batches(prepared):
    with pytest.raises(ConfigError, match="data.skip_steps"):
        Tracer(plans_of(prepared, skip_steps=[1]), Schedule(limit_batches=5))


def fit(prepared, ckpt_path=None, callbacks=(), logger=False, **keys):
    dm = PackedDataModule(prepared=prepared, **{**BASE, "num_workers": 0, **keys})
    model = Recorder()
    trainer = L.Trainer(
        max_epochs=EPOCHS, accelerator="cpu", logger=logger, callbacks=list(callbacks),
        use_distributed_sampler=False, limit_val_batches=0, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        accumulate_grad_batches=2,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return [(step, ids.tolist()) for step, ids in model.seen]


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
def test_under_lightning_steps_are_skipped_logged_and_a_resume_may_add_one(
    prepared, tmp_path, caplog
):
    base = fit(prepared)
    steps = [[b for s, b in base if s == k] for k in range(base[-1][0] + 1)]
    skip = [1, 6, 7]
    logger = Capture()
    with caplog.at_level(logging.INFO, logger="packlm.data.datamodule"):
        got = fit(prepared, logger=logger, skip_steps=skip, skip_documents=[4])
    kept = [s for k, s in enumerate(steps) if k not in skip]
    assert [[b for s, b in got if s == k] for k in range(len(kept))] == kept
    assert "skipping 1 document(s) [4 (0:data/part1.jsonl:4)]" in caplog.text
    assert "3 step(s) [1, 6, 7] (2 global batch(es) each)" in caplog.text
    assert "global batch(es)" in caplog.text and "of skipped steps are left out" in caplog.text
    assert logger.merged()["data/skipped_document_samples"] > 0
    # a resume from step 9 adds a later skip: the uninterrupted run with the longer list
    path = tmp_path / "step9.ckpt"
    fit(prepared, callbacks=[SaveAt(9, path)], skip_steps=skip)
    rest = fit(prepared, ckpt_path=path, skip_steps=[*skip, 12])
    again = fit(prepared, skip_steps=[*skip, 12])
    assert rest == [(s, b) for s, b in again if s >= 9]
    assert len(again) == len(got) - 2


def test_skip_steps_are_refused_with_limit_train_batches(prepared):
    dm = PackedDataModule(prepared=prepared, **{**BASE, "skip_steps": [2]})
    dm.trainer = L.Trainer(limit_train_batches=5, accelerator="cpu", logger=False)
    with pytest.raises(ConfigError, match="data.skip_steps: not with trainer.limit_train"):
        dm.setup("fit")


def test_an_unknown_document_fails_at_setup_before_any_trainer(prepared):
    dm = PackedDataModule(prepared=prepared, **{**BASE, "skip_documents": ["nope.jsonl:1"]})
    with pytest.raises(ConfigError, match="data.skip_documents: no training document has the id"):
        dm.setup("fit")
