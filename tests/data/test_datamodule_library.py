"""PackedDataModule as a library: built from keywords in Python, fed to a plain Trainer,
which it configures (reload every epoch) or refuses (a replaced sampler) itself."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch

from data.test_datamodule import KEYS, Recorder, prepared  # noqa: F401 (fixture)
from packlm.data.datamodule import PackedDataModule
from packlm.errors import ConfigError

pytestmark = pytest.mark.filterwarnings(
    "ignore:You passed in a `val_dataloader` but have no `validation_step`"
)
LONGER_LATER = dict(seed=0, random_offset=True, pack_size=9)  # epochs of 109, 108, 110 batches


def plain_trainer(**kwargs) -> L.Trainer:
    """A Trainer with none of packlm's settings: only quiet and small."""
    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    quiet.update(enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0)
    return L.Trainer(accelerator="cpu", devices=1, **quiet, **kwargs)


def test_a_plain_trainer_runs_every_epoch_whole(prepared):  # noqa: F811
    dm = PackedDataModule(prepared=prepared, **{**KEYS, **LONGER_LATER})
    lengths = [len(dm._loader("train", _sampler(dm, e))) for e in range(3)]
    assert lengths[2] > lengths[0]  # Lightning's default would cut epoch 2 to epoch 0's length
    model, trainer = Recorder(), plain_trainer(max_epochs=3)
    trainer.fit(model, datamodule=dm)
    assert trainer.reload_dataloaders_every_n_epochs == 1
    assert len(model.seen) == sum(lengths)


def _sampler(dm, epoch):
    from packlm.data.epoch.sampler import PlanSampler

    return PlanSampler(lambda e, p=None: dm.plan(e, "train", p), dm.data.batch_size, epoch=epoch)


def test_a_trainer_that_reloads_less_often_is_refused_naming_the_flag(prepared):  # noqa: F811
    dm = PackedDataModule(prepared=prepared, **KEYS)
    trainer = plain_trainer(max_epochs=1, reload_dataloaders_every_n_epochs=2)
    with pytest.raises(ConfigError, match="reload_dataloaders_every_n_epochs=2"):
        trainer.fit(Recorder(), datamodule=dm)


def test_lightnings_distributed_sampler_is_refused_naming_the_flag(prepared):  # noqa: F811
    """DDP with Lightning's default use_distributed_sampler=True would shard the plan twice
    (with one process: the loader's sampler is replaced and the data position lost)."""
    dm = PackedDataModule(prepared=prepared, **KEYS)
    trainer = plain_trainer(max_epochs=1, strategy="ddp")
    with pytest.raises(ConfigError, match="use_distributed_sampler=False"):
        trainer.fit(Recorder(), datamodule=dm)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def test_keywords_and_a_tokenizer_object_from_python(tiny_corpus, tmp_path):
    keys = dict(sources=[str(tiny_corpus)], window=16, stride=8, packing="document")
    keys.update(batch_size=4, num_workers=0, cache_dir=tmp_path / "cache", progress=False)
    dm = PackedDataModule(tokenizer={"vocab_size": 300}, **keys)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 16)
    again = PackedDataModule(tokenizer=dm.tokenizer, **keys)  # a Tokenizer, not a mapping
    assert again.tokenizer.digest() == dm.tokenizer.digest()
    assert again.store().n_tokens == dm.store().n_tokens
    first = next(iter(again.train_dataloader()))
    assert all(np.array_equal(first[k], batch[k]) for k in batch)
    with pytest.raises(ConfigError, match=r"^data\.strid: unknown key \(did you mean stride"):
        PackedDataModule(strid=8)


def test_varlen_adds_the_runs_to_each_batch(prepared):  # noqa: F811
    dm = PackedDataModule(prepared=prepared, varlen=True, **KEYS)
    batch = next(iter(dm.train_dataloader()))
    cu = batch["cu_seqlens"]
    assert cu[-1] == batch["input_ids"].numel() and int(batch["max_seqlen"]) <= KEYS["window"]
    assert "cu_seqlens" not in next(
        iter(PackedDataModule(prepared=prepared, **KEYS).val_dataloader())
    )
