"""`validation_follows` (LastCheckpoint's save-after-validation rule, from the Trainer's public
state) agrees with the validations Lightning actually runs: a change of Lightning's rule
fails here, before a checkpoint lands on the wrong side of a validation."""

from __future__ import annotations

import lightning as L
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel

from packlm.callbacks.checkpointing import validation_follows


class Record(L.Callback):
    def __init__(self, stop_at: int | None = None):
        self.stop_at, self.predicted, self.validated, self.batch = stop_at, [], [], None

    def on_train_batch_end(self, trainer, *args):
        if self.stop_at is not None and trainer.global_step == self.stop_at:
            trainer.should_stop = True
        self.batch = trainer.fit_loop.epoch_loop.total_batch_idx
        if validation_follows(trainer):
            self.predicted.append(self.batch)

    def on_validation_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.validated.append(self.batch)


@pytest.mark.parametrize(
    "settings, stop_at",
    [
        ({"val_check_interval": 3, "check_val_every_n_epoch": None, "max_steps": 10}, None),
        ({"val_check_interval": 0.5, "max_epochs": 2}, None),
        ({"check_val_every_n_epoch": 2, "max_epochs": 4}, None),
        (
            {
                "val_check_interval": 4,
                "check_val_every_n_epoch": None,
                "max_steps": 5,
                "accumulate_grad_batches": 2,
            },
            None,
        ),  # fmt: skip
        ({"val_check_interval": 100, "check_val_every_n_epoch": None, "max_steps": 20}, 3),
    ],
)
def test_the_rule_foresees_every_validation_of_lightning(settings, stop_at, tmp_path):
    record = Record(stop_at)
    trainer = L.Trainer(
        **settings, limit_train_batches=4, limit_val_batches=1, num_sanity_val_steps=0,
        callbacks=[record], logger=False, enable_checkpointing=False, accelerator="cpu",
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(BoringModel())
    assert record.validated, "no validation ran: the case checks nothing"
    assert record.predicted == record.validated
