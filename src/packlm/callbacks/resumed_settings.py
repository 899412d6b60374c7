"""A resume applies the current optimizer settings, not the checkpoint's.

Lightning restores the optimizer's param groups (lr, betas, eps, weight decay) and the
schedule's base lr from the checkpoint, so a changed `optim.lr` would be silently ignored.
After the restore this puts the config's values back and sets the current step's lr from
the schedule of the current config (warmup, cosine horizon, min_lr_ratio, max_steps).
"""

from __future__ import annotations

import lightning as L

from packlm.model.config import OptimConfig


class ResumedSettings(L.Callback):
    def __init__(self, optim: OptimConfig):
        self.optim = optim

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.ckpt_path:
            return
        o = self.optim
        optimizer = trainer.optimizers[0]
        decay, no_decay = optimizer.param_groups  # LitCausalLM.configure_optimizers' order
        decay["weight_decay"], no_decay["weight_decay"] = o.weight_decay, 0.0
        scheduler = trainer.lr_scheduler_configs[0].scheduler
        scheduler.base_lrs = [o.lr] * len(optimizer.param_groups)
        for group, factor in zip(optimizer.param_groups, scheduler.lr_lambdas, strict=True):
            group.update(betas=o.betas, eps=o.eps, initial_lr=o.lr)
            group["lr"] = o.lr * factor(scheduler.last_epoch)
