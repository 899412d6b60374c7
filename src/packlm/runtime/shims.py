"""The one module that uses private names of torch and Lightning: each with the reason, the
upstream issue that would make it public, and a check in tests/test_shims.py that fails
loudly when an upgrade moves or changes it. Everything else in packlm uses public API only
(tests/test_no_private_api.py).
"""

from __future__ import annotations

import torch
from torch import Tensor


def foreach_mul_(tensors: list[Tensor], scalar: float) -> None:
    """Multiply every tensor in place by `scalar`, one fused kernel for the whole list.

    torch's foreach ops are private (pytorch/pytorch#58833; the public `torch.foreach` of
    pytorch/pytorch#193607 is not released): used where it exists."""
    public = getattr(torch, "foreach", None)
    if public is not None and hasattr(public, "mul_"):
        public.mul_(tensors, scalar)
    else:
        torch._foreach_mul_(tensors, scalar)


def foreach_norm(tensors: list[Tensor]) -> list[Tensor]:
    """The L2 norm of each tensor, one fused kernel (see `foreach_mul_`)."""
    public = getattr(torch, "foreach", None)
    if public is not None and hasattr(public, "norm"):
        return list(public.norm(tensors))
    return list(torch._foreach_norm(tensors))


def start_the_epoch_after_a_last_batch_checkpoint(trainer) -> bool:
    """Restored from a checkpoint written at the last batch of epoch e (on_train_batch_end,
    before the epoch ended): make Lightning's loops start epoch e + 1 as an uninterrupted run
    does, batch_idx 0 and `on_train_epoch_start` called. True if it applied.

    Lightning moves such a run to epoch e + 1 but keeps it "restarted mid-epoch": it skips
    that epoch's `on_train_epoch_start` and resets the batch count only if the restored count
    reaches the new epoch's length (`_TrainingEpochLoop.reset`, `FitLoop.reset` and
    `on_advance_start` in lightning/pytorch/loops, 2.6), which holds only while every epoch
    has the same number of batches; an elastic resume (other ranks or batch size) or a plan
    whose length varies by epoch then counted on from e's count (7, 8, ...). No upstream
    issue covers it yet (the nearest: Lightning-AI/pytorch-lightning#21492, reloading on
    resume). Called before the loader of the resumed run is built, it marks epoch e finished
    (before `FitLoop.reset`; after it, when something read the loader's length first, e.g.
    `estimated_stepping_batches`, it clears the "mid-epoch" stage that reset set) and the
    batch count of the next one empty; the epoch loop's own restart step then records the
    last batch's completion (and its logging step) as it does for any checkpoint written at
    on_train_batch_end. tests/test_shims.py, tests/data/test_datamodule.py and
    tests/reliability/test_elastic_resume_ddp.py (epoch-end) check it.
    """
    fit = trainer.fit_loop
    epochs, batches = fit.epoch_progress, fit.epoch_loop.batch_progress
    at_batch_end = batches.total.completed == batches.total.processed - 1
    if not (fit.restarting and at_batch_end and batches.is_last_batch):
        return False
    if epochs.total.processed == epochs.total.started - 1:  # FitLoop.reset has not run yet
        for count in (epochs.total, epochs.current):
            count.processed = count.completed = count.started  # epoch e is over
    elif epochs.total.processed == epochs.total.started:  # it has (the loader was read early)
        fit.reset_restart_stage()  # moved on to e + 1: not "mid-epoch", its hooks run
    else:
        return False
    batches.current.reset()
    batches.current.completed = -1  # the restart step adds the last batch of epoch e: 0
    batches.is_last_batch = False
    fit.epoch_loop.scheduler_progress.reset_on_run()
    fit.epoch_loop.automatic_optimization.optim_progress.reset_on_run()
    fit.epoch_loop.val_loop.batch_progress.total.reset()
    return True
