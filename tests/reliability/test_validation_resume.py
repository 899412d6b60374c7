"""A validation due at a checkpointed step is not lost by a kill: the checkpoint of such a
step is written after the validation, so a kill during it resumes from the previous
checkpoint and validates that step again (issue 14)."""

from __future__ import annotations

import lightning as L
import pytest

from helpers.runs import assert_same_weights, checkpoint_step
from packlm.callbacks import BatchHashes
from packlm.callbacks.batch_hashes import read_batch_hashes
from packlm.train import train


class Killed(Exception):
    """Stands for a SIGKILL: nothing after it runs (no checkpoint, no teardown save)."""


class Validations(L.Callback):
    """The global steps at which a validation ended; optionally dies in the one of `kill_at`."""

    def __init__(self, kill_at: int | None = None):
        self.kill_at, self.ended = kill_at, []

    def on_validation_batch_start(self, trainer, *args):
        if trainer.global_step == self.kill_at and not trainer.sanity_checking:
            raise Killed

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.ended.append((trainer.global_step, float(trainer.callback_metrics["val/loss"])))


def test_a_kill_during_the_validation_of_a_checkpointed_step_loses_no_point(compose_tiny, tmp_path):
    overrides = ("train.checkpoint_every_n_steps=2",)  # val every 4: steps 4 and 8 do both
    reference = Validations()
    train(compose_tiny(*overrides), run_dir=tmp_path / "ref", callbacks=[reference])
    assert [s for s, _ in reference.ended] == [4, 8]

    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(compose_tiny(*overrides), run_dir=run, callbacks=[Validations(kill_at=4)])
    last = run / "checkpoints" / "last.ckpt"
    assert checkpoint_step(last) == 2  # step 4's checkpoint waits for its validation

    resumed, hashes = Validations(), tmp_path / "resumed.txt"
    train(compose_tiny(*overrides, f"ckpt_path={last}"), callbacks=[resumed, BatchHashes(hashes)])
    assert resumed.ended == reference.ended  # the point at step 4 is there, with its value
    assert sorted({step for step, *_ in read_batch_hashes(hashes)}) == list(range(2, 8))
    assert_same_weights(last, tmp_path / "ref" / "checkpoints" / "last.ckpt")


class KillAtStep(L.Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, *args):
        if trainer.global_step == self.step:
            raise Killed


def test_a_checkpoint_written_after_its_validation_resumes_without_validating_again(
    compose_tiny, tmp_path
):
    """Resuming from step 4's checkpoint (written after step 4's validation) goes on with
    step 5's batch and validates next at step 8, exactly as the uninterrupted run."""
    overrides = ("train.checkpoint_every_n_steps=4",)
    reference, ref_hashes = Validations(), tmp_path / "ref.txt"
    train(
        compose_tiny(*overrides),
        run_dir=tmp_path / "ref",
        callbacks=[reference, BatchHashes(ref_hashes)],
    )
    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(compose_tiny(*overrides), run_dir=run, callbacks=[KillAtStep(5)])
    last = run / "checkpoints" / "last.ckpt"
    assert checkpoint_step(last) == 4
    resumed, hashes = Validations(), tmp_path / "resumed.txt"
    train(compose_tiny(*overrides, f"ckpt_path={last}"), callbacks=[resumed, BatchHashes(hashes)])
    assert resumed.ended == [v for v in reference.ended if v[0] > 4]
    ref = {s: w for s, _, _, w, _ in read_batch_hashes(ref_hashes)}
    got = {s: w for s, _, _, w, _ in read_batch_hashes(hashes)}
    assert sorted(got) == [4, 5, 6, 7] and got == {s: ref[s] for s in got}
    assert_same_weights(last, tmp_path / "ref" / "checkpoints" / "last.ckpt")
