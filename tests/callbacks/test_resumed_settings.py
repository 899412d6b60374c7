"""A resume applies the current optim settings to each named param group, as a fresh run has them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from packlm.callbacks import ResumedSettings
from packlm.config.model import OptimConfig
from packlm.model.lit_module import LitCausalLM

MODEL = dict(vocab_size=32, context_length=8, n_layer=1, n_head=2, n_embd=16)


def module(**optim) -> LitCausalLM:
    torch.manual_seed(0)
    return LitCausalLM(MODEL, {"warmup_steps": 2, "max_steps": 20, **optim})


def stepped(lit: LitCausalLM, steps: int) -> tuple[torch.optim.Optimizer, object]:
    conf = lit.configure_optimizers()
    optimizer, scheduler = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
    return optimizer, scheduler


def test_a_resume_with_a_new_embedding_ratio_and_decay_gets_the_fresh_runs_groups():
    old = {"lr": 3e-3, "embedding_lr_ratio": 1.0, "weight_decay": 0.1}
    new = {"lr": 1e-3, "embedding_lr_ratio": 10.0, "weight_decay": 0.0}
    checkpoint_opt, checkpoint_sched = stepped(module(**old), 5)
    # what Lightning does on resume: the new module's optimizer, the checkpoint's state
    lit = module(**new)
    optimizer, scheduler = stepped(lit, 0)
    optimizer.load_state_dict(checkpoint_opt.state_dict())
    scheduler.load_state_dict(checkpoint_sched.state_dict())
    assert optimizer.param_groups[1]["lr"] == pytest.approx(checkpoint_opt.param_groups[1]["lr"])
    trainer = SimpleNamespace(
        ckpt_path="last.ckpt",
        optimizers=[optimizer],
        lr_scheduler_configs=[SimpleNamespace(scheduler=scheduler)],
    )
    ResumedSettings(OptimConfig(**new)).on_train_start(trainer, lit)

    fresh, _ = stepped(module(**new), 5)
    for got, want in zip(optimizer.param_groups, fresh.param_groups, strict=True):
        assert (got["name"], got["betas"], got["eps"]) == (want["name"], want["betas"], want["eps"])
        numbers = ("lr", "initial_lr", "weight_decay")
        assert {k: got[k] for k in numbers} == pytest.approx({k: want[k] for k in numbers})
    assert optimizer.param_groups[1]["lr"] == pytest.approx(10 * optimizer.param_groups[0]["lr"])
