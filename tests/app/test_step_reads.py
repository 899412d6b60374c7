"""No host sync in a training step: the step's counts come from the batch on the CPU, and its
losses stay on the device until a logging step reads them (issue #42, item 1).

On a CPU every tensor is on the host, so "read from the device" is checked as "read a
floating-point tensor's value": the step's losses, gradient norm and the divergence guard's
record are floats; the batch's ids and segment ids, which the CPU path may read for free
(`masks.is_stream`), are integers.
"""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch

import packlm.train.compose as run_compose
from helpers.runs import checkpoint_step, weights
from packlm.batch import COUNTS_KEY
from packlm.callbacks import FiniteTraining, TrainingDiverged
from packlm.data.datamodule import PackedDataModule
from packlm.data.epoch.collate import mark_stream
from packlm.train import train

RUN = ("trainer.max_steps=8", "trainer.log_every_n_steps=4", "trainer.val_check_interval=100",
       "train.sample_prompt=", "train.log_batch_images=false", "train.validate_at_end=false")  # fmt: skip
"""8 steps, logging every 4th, nothing else in between (no validation, samples, images)."""
READS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__", "__format__")


class FloatReadGuard(L.Callback):
    """Fails a run that reads a floating-point tensor's value inside a training step that is
    not a logging step: from the batch's start to the end of every callback's batch end (put
    it last among the callbacks)."""

    def __init__(self, monkeypatch):
        self.active = False
        self.guarded_steps = 0
        for name in READS:
            monkeypatch.setattr(torch.Tensor, name, self._guard(name, getattr(torch.Tensor, name)))

    def _guard(self, name, read):
        def guarded(tensor, *args, **kwargs):
            if self.active and tensor.is_floating_point():
                self.active = False  # let pytest print the tensor
                raise AssertionError(f"Tensor.{name} read a float tensor inside a training step")
            return read(tensor, *args, **kwargs)

        return guarded

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        logs = (trainer.global_step + 1) % trainer.log_every_n_steps == 0
        self.active = not logs
        self.guarded_steps += not logs

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        self.active = False


def test_a_training_step_reads_no_float_value_between_logging_steps(
    compose_tiny, tmp_path, monkeypatch
):
    """The whole run of train.py's callbacks (loss, counts, throughput, divergence guard in its
    accelerator mode), 8 steps logging every 4th: the 6 others read no float value, and the
    logging steps still write the loss and the counts."""
    monkeypatch.setattr(run_compose, "FiniteTraining", partial(FiniteTraining, every_step=False))
    guard = FloatReadGuard(monkeypatch)
    metrics = train(
        compose_tiny(*RUN),
        run_dir=tmp_path,
        callbacks=[guard],
    )
    assert guard.guarded_steps == 6
    assert metrics["tokens/supervised"] > 0 and torch.isfinite(torch.tensor(metrics["train/loss"]))


def counts_stripped(monkeypatch) -> None:
    """packlm's DataModule without its CPU counts: the loss counts on the device instead."""
    monkeypatch.setattr(
        PackedDataModule, "on_before_batch_transfer", lambda self, batch, idx: mark_stream(batch)
    )


class Record(L.Callback):
    def __init__(self):
        self.losses, self.counted, self.tokens_seen = [], [], {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(pl_module.last_loss))
        self.counted.append(COUNTS_KEY in batch)
        self.tokens_seen = dict(pl_module.tokens_seen)


@pytest.mark.parametrize("weighting", ["token", "document"])
def test_counts_from_the_cpu_train_the_very_weights_of_counts_on_the_device(
    compose_tiny, tmp_path, monkeypatch, weighting
):
    """With accumulation (cycles of 2 micro-batches, a short last one), the run whose counts
    come from the CPU and the run that counts on the device reach bit-identical weights,
    losses and token counts."""
    overrides = ("trainer.max_steps=5", "trainer.accumulate_grad_batches=2",
                 f"model.loss_weighting={weighting}", "train.sample_prompt=",
                 "train.log_batch_images=false")  # fmt: skip
    runs = {}
    for name in ("cpu", "device"):
        with monkeypatch.context() as m:
            if name == "device":
                counts_stripped(m)
            record = Record()
            metrics = train(compose_tiny(*overrides), run_dir=tmp_path / name, callbacks=[record])
            state = torch.load(tmp_path / name / "checkpoints" / "last.ckpt", weights_only=True)
            runs[name] = (record, metrics, state["state_dict"])
    (cpu, cpu_metrics, cpu_state), (device, device_metrics, device_state) = runs.values()
    assert all(cpu.counted) and not any(device.counted)
    assert cpu.losses == device.losses and len(cpu.losses) == 10
    assert cpu.tokens_seen == device.tokens_seen and min(cpu.tokens_seen.values()) > 0
    assert cpu_metrics["val/loss"] == device_metrics["val/loss"]
    assert cpu_state.keys() == device_state.keys()
    for key, value in cpu_state.items():
        assert torch.equal(value, device_state[key]), key


class PoisonAt(L.Callback):
    """The weights become NaN as optimizer step `step` starts: its loss is the first NaN."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, *args) -> None:
        if trainer.global_step + 1 == self.step:
            with torch.no_grad():
                for p in pl_module.parameters():
                    p.fill_(float("nan"))


def test_the_divergence_guard_in_accelerator_mode_names_the_first_bad_step(
    compose_tiny, tmp_path, monkeypatch
):
    """Reading the loss only when the Trainer logs (every 4 steps), the guard stops at step 4
    and names step 3, the first non-finite loss; last.ckpt keeps step 2's finite weights."""
    monkeypatch.setattr(run_compose, "FiniteTraining", partial(FiniteTraining, every_step=False))
    with pytest.raises(
        TrainingDiverged, match=r"training diverged at step 3: the training loss is nan"
    ):
        train(
            compose_tiny(*RUN, "train.checkpoint_every_n_steps=2"),
            run_dir=tmp_path,
            callbacks=[PoisonAt(3)],
        )
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert checkpoint_step(last) == 2
    assert all(torch.isfinite(w).all() for w in weights(last).values())


class CudaSyncGuard(L.Callback):
    """CUDA's own check: inside a step that does not log, any synchronizing call raises."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if (trainer.global_step + 1) % trainer.log_every_n_steps:
            torch.cuda.set_sync_debug_mode("error")

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_training_step_that_does_not_log_never_synchronizes(compose_tiny, tmp_path):
    """What the float-read guard above stands in for on a CPU, checked by CUDA itself."""
    try:
        train(
            compose_tiny(*RUN, "trainer.accelerator=gpu", "trainer.devices=1"),
            run_dir=tmp_path,
            callbacks=[CudaSyncGuard()],
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
