"""PackedDataModule: construction, dataloaders, statistics logging, exact resume in Lightning."""

from __future__ import annotations

import logging
import pickle
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from helpers.lightning_doubles import Capture, Recorder, SaveAt
from helpers.plans import write_position_store
from packlm.config.data import DataConfig
from packlm.data.datamodule import PackedDataModule
from packlm.data.store.prepared import PreparedData
from packlm.errors import ConfigError

TRAIN_LENGTHS = np.random.default_rng(0).integers(1, 60, size=90)
VAL_LENGTHS = np.random.default_rng(1).integers(1, 60, size=12)
KEYS = dict(window=8, stride=6, batch_size=4, num_workers=0, seed=5)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    train = write_position_store(
        root / "train", TRAIN_LENGTHS, (np.arange(90) % 2).tolist(), ["a", "b"]
    )
    val = write_position_store(root / "val", VAL_LENGTHS)
    return PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)


def module(prepared, **keys) -> PackedDataModule:
    return PackedDataModule(prepared=prepared, **{**KEYS, **keys})


def test_unknown_and_invalid_keys_fail_before_any_work_naming_the_key():
    with pytest.raises(ConfigError, match=r"^data\.windw: unknown key"):
        PackedDataModule(windw=8)
    with pytest.raises(ConfigError, match=r"^data\.window=512"):
        PackedDataModule(window=512, model_context=256)
    with pytest.raises(ConfigError, match=r"^data\.pack_size=8"):
        PackedDataModule(window=8, pack_size=8)


def test_hydra_style_and_dataclass_construction_agree():
    cfg = OmegaConf.create(
        {"sources": [{"path": "x.txt", "weight": 2}], "window": 16, "stride": 16}
    )
    a = PackedDataModule(tokenizer=OmegaConf.create({"vocab_size": 300}), **cfg)
    b = PackedDataModule(
        data=DataConfig(sources=[{"path": "x.txt", "weight": 2}], window=16, stride=16)
    )
    assert a.data == b.data and a.source_weights == [2.0]
    assert a.tokenizer_config.vocab_size == 300


def test_stride_beyond_window_is_allowed_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        PackedDataModule(window=8, stride=12)
    assert "data.stride=12 > data.window=8" in caplog.text


def test_ids_and_loaders(prepared):
    dm = module(prepared)
    dm.setup("fit")
    assert (dm.vocab_size, dm.eos_id, dm.pad_id) == (
        prepared.train_manifest["vocab_size"],
        dm.vocab_size - 2,
        dm.vocab_size - 1,
    )
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "labels", "segment_ids", "position_ids", "source_ids"}
    assert batch["input_ids"].shape == (4, 8)


def test_validation_scores_every_token_once(prepared):
    dm = module(prepared, packing="none", stride=3, random_offset=True, tail="drop")
    labels = torch.cat([b["labels"].flatten() for b in dm.val_dataloader()])
    counts = np.bincount(labels[labels >= 0].numpy(), minlength=VAL_LENGTHS.sum())
    doc_starts = np.r_[0, np.cumsum(VAL_LENGTHS)[:-1]]
    expected = np.ones(VAL_LENGTHS.sum(), dtype=np.int64)
    expected[doc_starts] = 0  # the first token of a document is never a target
    assert np.array_equal(counts, expected)


def test_ranks_come_from_the_trainer(prepared):
    dm = module(prepared)
    dm.trainer = SimpleNamespace(
        world_size=2,
        global_rank=1,
        fit_loop=SimpleNamespace(
            epoch_progress=SimpleNamespace(current=SimpleNamespace(processed=3))
        ),
    )
    sampler = dm.train_dataloader().sampler
    assert (sampler.rank, sampler.world_size, sampler.epoch) == (1, 2, 3)


class EarlyReader(Recorder):
    """Reads the epoch's length before the checkpoint is restored (as a schedule does)."""

    def configure_optimizers(self):
        assert self.trainer.estimated_stepping_batches > 0
        return super().configure_optimizers()


def fit(
    prepared, ckpt_path=None, callbacks=(), reload=1, logger=False, epochs=3, early=False, **keys
):
    dm, model = module(prepared, **keys), (EarlyReader() if early else Recorder())
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=logger,
        callbacks=list(callbacks),
        use_distributed_sampler=False,
        reload_dataloaders_every_n_epochs=reload,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return [ids for _, ids in model.seen], dm


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
@pytest.mark.parametrize(
    ("where", "reload", "workers"), [("mid", 1, 0), ("end", 1, 0), ("mid", 0, 0), ("mid", 1, 2)]
)
def test_resume_from_a_checkpoint_gives_the_batches_of_an_uninterrupted_run(
    prepared, tmp_path, where, reload, workers
):
    """Invariant 7, through Lightning's own checkpoint and fit loop."""
    keys = dict(
        random_offset=True, shuffle=True, shuffle_documents=True, num_workers=workers, reload=reload
    )
    dm = module(prepared, **{k: v for k, v in keys.items() if k != "reload"})
    first_epoch = len(dm.train_dataloader())
    step = first_epoch // 2 if where == "mid" else first_epoch
    path = tmp_path / "step.ckpt"
    full, _ = fit(prepared, callbacks=[SaveAt(step, path)], **keys)
    rest, _ = fit(prepared, ckpt_path=path, **keys)
    assert len(rest) == len(full) - step
    assert all(torch.equal(a, b) for a, b in zip(rest, full[step:], strict=True))


class BatchIndices(L.Callback):
    """What Lightning reports: (epoch, batch_idx, global_step) per batch, epochs started."""

    def __init__(self):
        self.batches, self.epochs = [], []

    def on_train_epoch_start(self, trainer, pl_module):
        self.epochs.append(trainer.current_epoch)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append((trainer.current_epoch, batch_idx, trainer.global_step))


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
@pytest.mark.parametrize(
    ("before", "after", "early"), [(8, 4, False), (4, 8, False), (4, 4, False), (8, 4, True)]
)
def test_an_epoch_end_resume_starts_the_next_epoch_at_batch_0(
    prepared, tmp_path, before, after, early
):
    """Resumed from the last batch of epoch 0 with another batch size (an elastic resume: the
    next epoch is longer or shorter than the restored count) or the same: Lightning reports
    epoch 1 from batch_idx 0, calls its on_train_epoch_start (the progress bar's reset), and
    the global step goes on; the epochs after it are the uninterrupted run's. `early`: the
    module reads the loader's length before the restore (Lightning's loops then move on in
    another order)."""
    first_epoch = len(module(prepared, batch_size=before).train_dataloader())
    path = tmp_path / "end.ckpt"
    fit(prepared, callbacks=[SaveAt(first_epoch, path)], epochs=1, batch_size=before)
    ref, got = BatchIndices(), BatchIndices()
    full, _ = fit(prepared, callbacks=[ref], batch_size=after)
    rest, _ = fit(prepared, ckpt_path=path, callbacks=[got], batch_size=after, early=early)
    assert got.epochs == [1, 2] and ref.epochs == [0, 1, 2]
    later = [(e, i) for e, i, _ in ref.batches if e > 0]
    assert [(e, i) for e, i, _ in got.batches] == later
    assert [s for _, _, s in got.batches] == list(range(first_epoch, first_epoch + len(later)))
    assert all(torch.equal(a, b) for a, b in zip(rest, full[-len(later) :], strict=True))


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
def test_each_epoch_logs_its_plan_statistics(prepared):
    logger = Capture()
    _, dm = fit(prepared, logger=logger, epochs=2, random_offset=True)
    logged = [(step, m) for step, m in logger.rows if "data/samples" in m]
    assert [m["data/epoch"] for _, m in logged] == [0.0, 1.0]
    for _, m in logged:
        stats = dm.plan_statistics(int(m["data/epoch"]))
        assert m["data/supervised_tokens"] == stats["supervised_tokens"]
        assert m["data/source/a/samples"] + m["data/source/b/samples"] == stats["samples"]


def test_tensorboard_gets_histograms(prepared, tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger

    dm = module(prepared)
    tb = TensorBoardLogger(str(tmp_path), name="tb")
    dm.trainer = SimpleNamespace(global_step=0, loggers=[tb])
    dm.log_plan_statistics(0)
    tb.experiment.flush()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(tb.log_dir).Reload()
    assert {
        "data/target_multiplicity",
        "data/window_start_in_document",
        "data/document_length",
    } <= set(events.Tags()["histograms"])
    assert "data/samples" in events.Tags()["scalars"]


def test_supervised_tokens_per_batch_matches_the_first_epoch(prepared):
    dm = module(prepared, stride=8)
    stats = dm.plan_statistics(0)
    assert dm.supervised_tokens_per_batch() == pytest.approx(
        stats["supervised_tokens"] / stats["samples"] * 4
    )


def test_prepare_data_trains_the_tokenizer_and_builds_the_stores(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(40):
        (docs / f"{i:02d}.txt").write_text(f"text number {i} " * (1 + i % 4), encoding="utf-8")
    dm = PackedDataModule(
        tokenizer={"vocab_size": 300},
        cache_dir=tmp_path / "cache",
        sources=[str(docs / "*.txt")],
        val_fraction=0.25,
        window=16,
        stride=16,
        batch_size=16,
        num_workers=0,
        progress=False,
    )
    dm.prepare_data()
    dm.setup("fit")
    assert dm.vocab_size == dm.tokenizer.vocab_size <= 300
    assert dm.eos_id == dm.tokenizer.special_token_ids["<|endoftext|>"]
    assert dm.pad_id == dm.tokenizer.special_token_ids["<|pad|>"]
    assert len(dm.token_byte_lengths) == dm.vocab_size
    text = [
        dm.tokenizer.decode(b["input_ids"][b["segment_ids"] >= 0].tolist())
        for b in dm.val_dataloader()
    ]
    assert "text number" in "".join(text)
    clone = pickle.loads(pickle.dumps(dm))
    assert clone._stores == {}
    rows, window = next(iter(clone.train_dataloader()))["input_ids"].shape
    assert window == 16 and 0 < rows <= 16  # B rows, or the whole split when it holds fewer


@pytest.mark.parametrize("group_by", ["source", "directory"])
def test_group_by_keeps_each_group_of_the_store_adjacent(tmp_path, group_by):
    from packlm.data.store.token_store import write_store

    docs = [np.arange(1, 2 + i % 7) for i in range(60)]
    ids = [f"{i % 2}:project{i % 5}/module{i}.py" for i in range(60)]
    train = write_store(
        tmp_path / "train", docs, 20, 0, 19, ids, [i % 2 for i in range(60)], ["a", "b"]
    )
    val = write_store(tmp_path / "val", docs[:3], 20, 0, 19)
    prepared = PreparedData(None, tmp_path, train.path, val.path, train.manifest, val.manifest)
    dm = module(prepared, group_by=group_by, shuffle_documents=True)
    plan = dm.plan(1)
    if group_by == "source":
        key = np.asarray(train.doc_sources)[plan.order]
    else:
        key = np.array([ids[d].rpartition("/")[0] for d in plan.order])
    assert len(np.unique(key)) == (2 if group_by == "source" else 10)
    assert (key[1:] != key[:-1]).sum() == len(np.unique(key)) - 1  # contiguous groups
    assert sorted(plan.order.tolist()) == list(range(60))


def test_bos_makes_every_first_token_a_target_and_counts_follow(prepared):
    def targets(dm, loader):
        labels = torch.cat([b["labels"].flatten() for b in loader])
        return labels[labels != -100]

    plain = module(prepared, stride=8, random_offset=False, shuffle=False)
    bos = module(prepared, stride=8, random_offset=False, shuffle=False, bos=True)
    for dm, per_doc in ((plain, -1), (bos, 0)):  # a document of n tokens (EOS included)
        val = targets(dm, dm.val_dataloader())
        assert len(val) == int(VAL_LENGTHS.sum()) + per_doc * len(VAL_LENGTHS)  # each once
    store = bos.store("val")
    firsts = torch.as_tensor([int(store.document(d)[0]) for d in range(store.n_docs)])
    assert torch.isin(firsts, targets(bos, bos.val_dataloader())).all()
    assert not torch.isin(firsts, targets(plain, plain.val_dataloader())).any()
    batch = next(iter(bos.train_dataloader()))
    seg = batch["segment_ids"]
    starts = (seg[:, 1:] != seg[:, :-1]) & (seg[:, 1:] >= 0)  # documents starting mid-row
    bos_id = bos.store("train").eos_id  # EOS doubles as BOS
    assert starts.any() and (batch["input_ids"][:, 1:][starts] == bos_id).all()
    stats = bos.plan_statistics(0, "val")
    assert stats["supervised_tokens"] == int(VAL_LENGTHS.sum())


def test_validation_batches_name_each_tokens_store_document(prepared):
    """`document_ids`: a target belongs to its input token's document (a position store:
    token id = store position, so the document is found from the id)."""
    dm = module(prepared, packing="document")
    dm.setup("fit")
    assert "document_ids" not in next(iter(dm.train_dataloader()))
    offsets = np.asarray(dm.store("val").doc_offsets)
    seen = set()
    for batch in dm.val_dataloader():
        ids, docs = batch["input_ids"].numpy(), batch["document_ids"].numpy()
        real = batch["segment_ids"].numpy() >= 0
        assert docs.dtype == np.int32 and (docs[~real] == -1).all()
        expected = np.searchsorted(offsets, ids[real], side="right") - 1
        assert np.array_equal(docs[real], expected)
        seen.update(docs[real].tolist())
    assert seen == set(range(len(VAL_LENGTHS)))
