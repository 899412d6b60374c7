"""LightningModule around the Transformer: forward, the token-weighted loss, AdamW.

The loss of an optimizer step is the sum of cross-entropy over its supervised targets divided
by N, the supervised targets of the whole step (all micro-batches and ranks): the mixin
`packlm.model.step_loss.ExactStepLoss` (which any LightningModule can use) accumulates the
step's totals on the device, reduces them once per step, rescales the gradients and keeps
`last_step`, `last_loss`, `last_grad_norm` and `tokens_seen` for the callbacks; the
derivation is `packlm.model.loss`. Logging them is `packlm.callbacks.StepMetrics`.

Callbacks' `on_before_optimizer_step` run before this module's, so they see gradients
before the rescale (off by a positive factor only).

The lr schedule is linear warmup then cosine over optimizer steps; under data.curriculum its
clock is the supervised tokens trained (`tokens_seen`, so a resume is exact), with warmup
and horizon converted from steps to the tokens the curriculum's phases are expected to take.
With optim.anneal_by_time and trainer.max_time the cosine also runs on Lightning's Timer
(rank 0's clock), whichever is further along: a run the time limit ends is annealed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.utilities import GradClipAlgorithmType, rank_zero_info, rank_zero_warn
from torch import Tensor

from packlm.batch import IGNORE_INDEX
from packlm.config.model import ModelConfig, OptimConfig, as_dict, param_group_names
from packlm.model.compiled_views import CompiledViews
from packlm.model.loss import document_weights, head_cross_entropy
from packlm.model.muon import MuonAdamW, bf16_native
from packlm.model.schedule import lr_factor, time_limit
from packlm.model.step_loss import ExactStepLoss
from packlm.model.transformer import Transformer


class LitCausalLM(ExactStepLoss, CompiledViews, L.LightningModule):
    def __init__(
        self,
        model: ModelConfig | Mapping[str, Any] | None = None,
        optim: OptimConfig | Mapping[str, Any] | None = None,
        token_byte_lengths: Sequence[int] | Tensor | None = None,
    ):
        super().__init__()
        self.model_config = ModelConfig.from_mapping(model)
        self.optim_config = OptimConfig.from_mapping(optim)
        self.save_hyperparameters(
            {"model": as_dict(self.model_config), "optim": as_dict(self.optim_config)}
        )
        self.model = Transformer(self.model_config)
        # each weight's rank as built: FSDP hands configure_optimizers 1-D shards of them
        self._built_dims = {id(p): p.dim() for p in self.model.parameters()}
        # model.compile=auto runs eagerly unless train.py decides otherwise at the run's start
        self.use_compiled_views(self.model_config.compile is True)
        self.register_buffer("token_byte_lengths", None, persistent=False)
        if token_byte_lengths is not None:
            self.set_token_byte_lengths(token_byte_lengths)
        self.loss_scale = 1.0 / self.model_config.context_length  # s in packlm.model.loss
        self._eval: Tensor | None = None  # [nats, supervised, bytes] of the eval loop so far
        self._warmup_end_s: float | None = None  # Timer seconds at warmup's end (checkpointed)

    # --- plumbing -------------------------------------------------------------------------

    @property
    def loss_weighting(self) -> str:
        """ExactStepLoss's denominator: model.loss_weighting."""
        return self.model_config.loss_weighting

    def set_token_byte_lengths(self, lengths: Sequence[int] | Tensor) -> None:
        """UTF-8 byte length of each token id (0 for special tokens), for val/bpb."""
        lengths = torch.as_tensor(lengths, dtype=torch.int64, device=self.device)
        if lengths.shape != (self.model_config.vocab_size,):
            raise ValueError(
                f"token_byte_lengths: shape {tuple(lengths.shape)}, expected "
                f"({self.model_config.vocab_size},) = (model.vocab_size,)"
            )
        self.token_byte_lengths = lengths

    def forward(self, input_ids, segment_ids=None, position_ids=None) -> Tensor:
        return self._run_model(input_ids, segment_ids, position_ids)  # [B, T, V]

    def _cross_entropy(
        self, batch: Mapping[str, Tensor], weights: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """(sum over the supervised targets of weight * CE, float32 [B, T] CE): the chunked
        head on the (compiled) trunk, or logits + F.cross_entropy (`head_cross_entropy`).

        A stream batch (all segment ids 0) takes the is_causal kernel in eager runs; a compiled
        run gives every batch its segment ids (the mask of all-0 ids is the causal one), since
        None for some batches and a tensor for others would compile each graph twice."""
        stream = batch.get("stream") and not self.runs_compiled
        segment_ids = None if stream else batch.get("segment_ids")
        inputs = (batch["input_ids"], segment_ids, batch.get("position_ids"))
        return head_cross_entropy(
            self.model, self, inputs, batch["labels"], weights, hidden_of=self._run_hidden
        )

    def _sum_ce(self, batch: Mapping[str, Tensor], weights: Tensor | None = None):
        """(sum of (weighted) CE over the supervised targets of a batch (0 if none), float32
        [B, T] CE); keeps the CE as `last_target_ce` (ExactStepLoss's)."""
        weighted, ce = self._cross_entropy(batch, weights)
        self.last_target_ce = ce.detach()
        return weighted, ce

    # --- training: the loss of packlm.model.loss ------------------------------------------

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        if self.loss_weighting == "token":
            objective = self.record_micro_batch(batch, self._sum_ce(batch)[0])
        else:  # document: each target weighted by 1 / (targets of its document piece)
            dtype = torch.promote_types(self.model.lm_head.weight.dtype, torch.float32)  # CE's
            weights, pieces = document_weights(batch["labels"], batch.get("segment_ids"), dtype)
            weighted, ce = self._sum_ce(batch, weights)  # ce [B, T]
            objective = self.record_micro_batch(batch, ce.sum(), weighted, pieces)
        return objective * self.loss_scale

    # --- validation / test: totals over the whole loop and all ranks ------------------------

    def on_validation_epoch_start(self) -> None:
        self._eval = None

    def on_test_epoch_start(self) -> None:
        self._eval = None

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        sum_ce, supervised = self._sum_ce(batch)[0], batch["labels"] != IGNORE_INDEX
        n_bytes = torch.zeros((), dtype=torch.int64, device=sum_ce.device)
        if self.token_byte_lengths is not None:
            ids = batch["labels"].clamp(min=0)  # [B, T]; -100 -> 0, masked out below
            n_bytes = (self.token_byte_lengths[ids] * supervised).sum()
        stats = torch.stack([sum_ce.double(), supervised.sum().double(), n_bytes.double()])
        self._eval = stats if self._eval is None else self._eval + stats

    test_step = validation_step

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")

    def _log_eval(self, prefix: str) -> None:
        local = (
            self._eval
            if self._eval is not None
            else torch.zeros(3, dtype=torch.float64, device=self.device)
        )
        nats, n_sup, n_bytes = self.trainer.strategy.reduce(local, reduce_op="sum").tolist()
        self._eval = None
        if n_sup == 0:
            return
        loss = nats / n_sup
        logs = {f"{prefix}/loss": loss, f"{prefix}/ppl": math.exp(min(loss, 700.0))}
        if n_bytes > 0:
            logs[f"{prefix}/bpb"] = nats / math.log(2) / n_bytes
        elif self.token_byte_lengths is None:
            rank_zero_warn("LitCausalLM: no token_byte_lengths set, so no bits per byte is logged")
        # the values are already global; sync_dist averages equal numbers (keeps ranks agreeing)
        self.log_dict(logs, on_step=False, on_epoch=True, sync_dist=True, batch_size=1)

    # --- optimizer and schedule -----------------------------------------------------------

    def _attached_trainer(self) -> L.Trainer | None:
        """The Trainer, or None before one is attached (`self.trainer` raises then)."""
        try:
            return self.trainer
        except RuntimeError:
            return None

    def _fused_optimizer(self) -> bool:
        """One fused AdamW kernel per step (about 2 ms less a step than foreach at the nanoGPT
        CPU shape), except under fp16's GradScaler: a fused step unscales inside, too late for
        clipping. bf16-mixed has no scaler (see `configure_gradient_clipping`)."""
        trainer = self._attached_trainer()
        plugin = trainer.precision_plugin if trainer is not None else None
        scaled = getattr(plugin, "scaler", None) is not None  # MixedPrecision's, for fp16
        return self.device.type in ("cuda", "cpu") and not scaled

    def configure_gradient_clipping(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        """Clip by norm with the norm `on_before_optimizer_step` took (train/grad_norm), not a
        second pass over the gradients; with whole parameters on each rank (one device, DDP).
        Lightning's own clipping would also refuse a fused optimizer under bf16-mixed, a rule
        for fp16's GradScaler (a fused step unscales inside); bf16 has no scaler."""
        algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
        whole = type(self.trainer.strategy) in (SingleDeviceStrategy, DDPStrategy)
        if gradient_clip_val and algorithm == GradClipAlgorithmType.NORM and whole:
            params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
            torch.nn.utils.clip_grads_with_norm_(params, gradient_clip_val, self.last_grad_norm)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def param_groups(self) -> list[dict[str, Any]]:
        """The optimizer's groups by name: matrices decay; the token embedding (a matrix)
        also trains at lr * optim.embedding_lr_ratio; vectors (norm weights) neither decay
        nor scale. optim=muon: the hidden matrices (not embedding, not head) are Muon's, at
        optim.muon_lr and muon_weight_decay; the head is AdamW's at lr (none when tied)."""
        o = self.optim_config
        embedding, head = self.model.wte.weight, self.model.lm_head.weight
        params = list(self.model.parameters())  # tied weights appear once
        matrix = {id(p) for p in params if self._built_dims.get(id(p), p.dim()) >= 2}  # not .dim()
        vectors = [p for p in params if id(p) not in matrix]
        embedding_group = {
            "params": [embedding],
            "weight_decay": o.weight_decay,
            "lr": o.lr * o.embedding_lr_ratio,
        }
        if o.algorithm == "muon":
            hidden = [p for p in params if id(p) in matrix and p is not embedding and p is not head]
            groups = [
                {"params": hidden, "weight_decay": o.muon_weight_decay, "lr": o.muon_lr, "muon": True},
                embedding_group,
                {"params": [] if head is embedding else [head], "weight_decay": o.weight_decay, "lr": o.lr},
                {"params": vectors, "weight_decay": 0.0, "lr": o.lr},
            ]  # fmt: skip
        else:
            matrices = [p for p in params if id(p) in matrix and p is not embedding]
            groups = [
                {"params": matrices, "weight_decay": o.weight_decay, "lr": o.lr},
                embedding_group,
                {"params": vectors, "weight_decay": 0.0, "lr": o.lr},
            ]
        names = param_group_names(o)
        return [dict(group, name=name) for name, group in zip(names, groups, strict=True)]

    def _optimizer(self) -> torch.optim.Optimizer:
        """AdamW, or under optim=muon the MuonAdamW of packlm.model.muon."""
        o = self.optim_config
        fused = self._fused_optimizer()
        if o.algorithm != "muon":
            return torch.optim.AdamW(
                self.param_groups(), lr=o.lr, betas=o.betas, eps=o.eps, fused=fused
            )
        native = o.muon_ns_dtype == "bfloat16" or (
            o.muon_ns_dtype == "auto" and bf16_native(self.device)
        )
        if o.muon_ns_dtype != "auto":
            reason = f"optim.muon_ns_dtype={o.muon_ns_dtype}"
        else:
            reason = f"bf16 matmuls {'native' if native else 'emulated'} on this {self.device.type}"
        precision = "bfloat16 (torch.optim.Muon)" if native else "float32"
        rank_zero_info(f"optim=muon: Newton-Schulz in {precision} ({reason})")
        return MuonAdamW(
            self.param_groups(),
            betas=o.betas,
            eps=o.eps,
            fused=fused,
            momentum=o.muon_momentum,
            momentum_start=o.muon_momentum_start,
            momentum_warmup_steps=o.muon_momentum_warmup_steps,
            ns_steps=o.muon_ns_steps,
            ns_dtype=torch.bfloat16 if native else torch.float32,
        )

    def configure_optimizers(self) -> dict[str, Any]:
        o = self.optim_config
        optimizer = self._optimizer()
        total = o.max_steps if o.max_steps is not None else self.trainer.estimated_stepping_batches
        timer = time_limit(self.trainer) if o.anneal_by_time else None
        if not math.isfinite(total) and timer is None:  # only trainer.max_time ends the run
            rank_zero_warn(
                "no step horizon (trainer.max_time alone): the lr stays flat after warmup; "
                "optim.anneal_by_time=true decays it by the time limit"
            )
            total = math.inf
        clock, warmup, first, horizon = (lambda step: step), o.warmup_steps, 1, total
        tokens_after = self._curriculum_tokens()
        if tokens_after is not None:  # the clock is supervised tokens (resumed: tokens_seen)
            clock = lambda _step: self.tokens_seen["supervised"]  # noqa: E731
            warmup, first = tokens_after(o.warmup_steps), tokens_after(1)
            horizon = tokens_after(total) if math.isfinite(total) else math.inf

        def schedule(step: int) -> float:
            now = clock(step)
            on_time = self._time_progress(timer) if timer is not None and now >= warmup else 0.0
            return lr_factor(
                now, warmup, horizon, o.min_lr_ratio, first, on_time, o.schedule, o.warmdown_ratio
            )

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    def _curriculum_tokens(self):
        """Under data.curriculum, optimizer steps -> expected supervised tokens (all ranks),
        phase by phase; None otherwise: the schedule counts steps."""
        trainer = self._attached_trainer()
        datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
        if not getattr(getattr(datamodule, "data", None), "curriculum", None):
            return None
        per_step = trainer.accumulate_grad_batches
        return lambda steps: datamodule.expected_supervised_tokens(steps * per_step)

    def _time_progress(self, timer: Timer) -> float:
        """Share of the time limit spent since warmup ended, on rank 0's clock (every rank
        must set the same lr); the first call, at warmup's end, starts it."""
        elapsed = timer.time_elapsed()
        limit = elapsed + timer.time_remaining()  # trainer.max_time in seconds, as rounded here
        if self.trainer.world_size > 1:  # both: a limit rounded on another clock differs in bits
            elapsed, limit = self.trainer.strategy.broadcast((elapsed, limit), src=0)
        if self._warmup_end_s is None:
            self._warmup_end_s = elapsed
        after_warmup = limit - self._warmup_end_s
        return (elapsed - self._warmup_end_s) / after_warmup if after_warmup > 0 else 1.0

    # --- checkpoints ----------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)  # tokens_seen (ExactStepLoss)
        checkpoint["packlm_warmup_end_s"] = self._warmup_end_s

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self._warmup_end_s = checkpoint.get("packlm_warmup_end_s")
