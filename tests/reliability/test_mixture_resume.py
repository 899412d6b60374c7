"""A mixture by share through Lightning's fit loop: exact resume from checkpoints written
before, at and after a schedule change and at epoch ends, and a changed schedule refused on
resume unless data.mixture_change_on_resume (on a store whose token at position p is p)."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch

from helpers.plans import write_position_store
from packlm.data.datamodule import PackedDataModule
from packlm.data.store.prepared import PreparedData
from packlm.errors import ConfigError

LENGTHS = np.random.default_rng(2).integers(1, 60, size=90)
SOURCES = np.repeat([0, 1, 2], [50, 30, 10])
NAMES = ["web", "code", "math"]
CHANGE = 7  # the step of the schedule's second point


def schedule(change=CHANGE, last=(0.2, 0.3, 0.5)):
    return [
        {"step": 0, "shares": {"web": 0.6, "code": 0.3, "math": 0.1}},
        {"step": change, "shares": dict(zip(NAMES, last, strict=True))},
    ]


class Recorder(L.LightningModule):
    """Records every training batch and its epoch; its one weight never changes the data."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[torch.Tensor] = []
        self.epochs: list[int] = []

    def training_step(self, batch, batch_idx):
        self.epochs.append(self.current_epoch)
        self.seen.append(batch["input_ids"].clone())
        return (self.w * batch["input_ids"].float().mean()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class SaveAt(L.Callback):
    def __init__(self, steps, directory):
        self.steps, self.directory = set(steps), directory

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step in self.steps:
            trainer.save_checkpoint(self.directory / f"{trainer.global_step}.ckpt")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    train_store = write_position_store(root / "train", LENGTHS, SOURCES.tolist(), NAMES)
    val = write_position_store(root / "val", LENGTHS[:10])
    return PreparedData(None, root, train_store.path, val.path, train_store.manifest, val.manifest)


def fit(prepared, ckpt_path=None, callbacks=(), workers=0, **data):
    data = {"mixture_schedule": schedule(), **data}
    dm = PackedDataModule(
        prepared=prepared, sources=[f"{n}.txt" for n in NAMES], batch_size=4, window=8,
        stride=6, num_workers=workers, seed=5, **data,
    )  # fmt: skip
    model = Recorder()
    trainer = L.Trainer(
        max_epochs=2, accelerator="cpu", logger=False, callbacks=list(callbacks),
        use_distributed_sampler=False, reload_dataloaders_every_n_epochs=1,
        limit_val_batches=0, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
def test_resume_across_the_schedule_change_and_an_epoch_end_is_exact(prepared, tmp_path):
    reference = fit(prepared, mixture_interpolation="linear")
    first_epoch = reference.epochs.count(0)
    assert CHANGE < first_epoch < len(reference.seen)
    stops = [CHANGE - 1, CHANGE, CHANGE + 1, first_epoch, first_epoch + 1]
    fit(prepared, callbacks=[SaveAt(stops, tmp_path)], mixture_interpolation="linear")
    for stop in stops:
        rest = fit(prepared, tmp_path / f"{stop}.ckpt", mixture_interpolation="linear")
        assert len(rest.seen) == len(reference.seen) - stop, stop
        assert all(torch.equal(a, b) for a, b in zip(rest.seen, reference.seen[stop:], strict=True))
        assert rest.epochs == reference.epochs[stop:], stop


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
def test_a_changed_schedule_is_refused_on_resume_unless_asked_for(prepared, tmp_path):
    reference = fit(prepared, callbacks=[SaveAt([3], tmp_path)])
    later = schedule(change=CHANGE + 2)
    with pytest.raises(ConfigError, match=r"data\.mixture_schedule.*mixture_change_on_resume"):
        fit(prepared, tmp_path / "3.ckpt", mixture_schedule=later)
    # asked for: a change after the resume point continues exactly up to the old change
    rest = fit(prepared, tmp_path / "3.ckpt", mixture_schedule=later, mixture_change_on_resume=True)
    same = zip(rest.seen[: CHANGE - 4], reference.seen[3 : CHANGE - 1], strict=True)
    assert all(torch.equal(a, b) for a, b in same)
