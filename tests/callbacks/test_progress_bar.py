"""The rich progress bar says "Epoch 0" in a run without an epoch limit, not "Epoch 0/-2"."""

from __future__ import annotations

import pytest

pytest.importorskip("rich")

import lightning as L  # noqa: E402
from lightning.pytorch.demos.boring_classes import BoringModel  # noqa: E402

from packlm.callbacks import EpochProgressBar  # noqa: E402


class Labels(L.Callback):
    """The train bar's label after every hook of the bar (callbacks run after the bar)."""

    def __init__(self, bar: EpochProgressBar):
        self.bar, self.seen = bar, []

    def on_train_epoch_start(self, trainer, pl_module):
        self.seen.append(self.bar.train_progress_bar.description)

    def on_train_batch_end(self, trainer, *args):
        self.seen.append(self.bar.train_progress_bar.description)


@pytest.mark.parametrize(("max_epochs", "label"), [(-1, "Epoch 0"), (5, "Epoch 0/4")])
def test_the_epoch_label_shows_a_limit_only_when_there_is_one(max_epochs, label, tmp_path):
    bar = EpochProgressBar()
    labels = Labels(bar)
    trainer = L.Trainer(
        max_epochs=max_epochs, max_steps=2, callbacks=[bar, labels], logger=False,
        enable_checkpointing=False, accelerator="cpu", limit_val_batches=0,
        enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    assert trainer.progress_bar_callback is bar
    trainer.fit(BoringModel())
    assert len(labels.seen) == 3
    assert {text.strip() for text in labels.seen} == {label}
