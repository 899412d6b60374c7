"""A resume applies the current optimizer settings, not the checkpoint's.

Lightning restores the optimizer's param groups (lr, betas, eps, weight decay) and the
schedule's base lr from the checkpoint, so a changed `optim.lr` would be silently ignored.
After the restore this puts the config's values back, group by group
(`LitCausalLM.param_groups`), and sets the current step's lr from the schedule of the
current config (warmup, cosine horizon, min_lr_ratio, max_steps, embedding_lr_ratio).
"""

from __future__ import annotations

import lightning as L

from packlm.config.model import OptimConfig


class ResumedSettings(L.Callback):
    def __init__(self, optim: OptimConfig):
        self.optim = optim

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.ckpt_path:
            return
        o = self.optim
        optimizer = trainer.optimizers[0]
        scheduler = trainer.lr_scheduler_configs[0].scheduler
        current = {g["name"]: g for g in pl_module.param_groups()}  # this config's settings
        scheduler.base_lrs = [current[g["name"]]["lr"] for g in optimizer.param_groups]
        for group, factor in zip(optimizer.param_groups, scheduler.lr_lambdas, strict=True):
            want = current[group["name"]]
            if not group.get("muon"):  # AdamW's (optim=muon: Muon's groups have neither)
                group.update(betas=o.betas, eps=o.eps)
            group.update(weight_decay=want["weight_decay"])
            group.update(initial_lr=want["lr"], lr=want["lr"] * factor(scheduler.last_epoch))
