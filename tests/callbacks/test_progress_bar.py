"""The rich progress bar says "Epoch 3" in a run without an epoch limit, not "Epoch 3/-2"."""

from __future__ import annotations

import pytest

pytest.importorskip("rich")

import lightning as L  # noqa: E402

from packlm.callbacks import EpochProgressBar  # noqa: E402


@pytest.mark.parametrize(("max_epochs", "label"), [(-1, "Epoch 3"), (5, "Epoch 3/4")])
def test_the_epoch_label_shows_a_limit_only_when_there_is_one(max_epochs, label):
    bar = EpochProgressBar()
    trainer = L.Trainer(
        max_epochs=max_epochs, max_steps=10, callbacks=[bar], logger=False,
        enable_checkpointing=False, accelerator="cpu",
    )  # fmt: skip
    assert trainer.progress_bar_callback is bar
    bar.setup(trainer, L.LightningModule(), stage="fit")  # what fit() does first
    assert bar._get_train_description(3).strip() == label
