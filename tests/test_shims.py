"""Each private name `packlm.runtime.shims` uses still exists and still does what packlm relies on:
an upgrade of torch or Lightning that moves or changes one fails here, by name."""

from __future__ import annotations

import torch

from packlm.runtime import shims


def test_foreach_mul_scales_every_tensor_in_place():
    tensors = [torch.ones(3), torch.full((2, 2), 2.0)]
    shims.foreach_mul_(tensors, 0.5)
    assert torch.equal(tensors[0], torch.full((3,), 0.5))
    assert torch.equal(tensors[1], torch.ones(2, 2))


def test_foreach_norm_is_the_l2_norm_of_each_tensor():
    tensors = [torch.tensor([3.0, 4.0]), torch.tensor([[1.0, 2.0], [2.0, 4.0]])]
    norms = shims.foreach_norm(tensors)
    assert [float(n) for n in norms] == [5.0, 5.0]


def test_the_epoch_after_a_last_batch_checkpoint_leaves_a_fresh_trainer_alone():
    """The loop counters it reads exist (the restored case: tests/data/test_datamodule.py)."""
    import lightning as L

    from packlm.runtime.shims import start_the_epoch_after_a_last_batch_checkpoint

    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert start_the_epoch_after_a_last_batch_checkpoint(trainer) is False
