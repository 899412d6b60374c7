"""LightningModule around the Transformer: token-weighted loss, token counts, AdamW, logging.

Loss weighting (DESIGN "Model and loss"). The loss of one optimizer step is

    sum of CE over the supervised targets of the step / N,   N = number of those targets,

where the step is every micro-batch of the accumulation cycle on every rank. N is only
known when the cycle is over, so automatic optimization is kept and the weighting is
fixed afterwards, exactly:

1. `training_step` returns s * (sum of CE of the micro-batch), s = 1 / context_length a
   constant that only keeps fp16 gradients in range. Lightning divides it by
   A = accumulate_grad_batches, DDP averages gradients over W ranks, so after the last
   backward  grad = s / (A W) * sum over micro-batches and ranks of grad(sum of CE).
2. `on_before_optimizer_step` all-reduces the cycle's counts (nats, N, token counts) in
   one call and multiplies every gradient by A W / (s N): grad = grad(sum CE / N). This
   holds whatever the number of targets of each micro-batch and rank, and for a short
   last cycle of an epoch (Lightning divides by A there too).
3. Lightning clips (Trainer `gradient_clip_val`), AdamW steps, the schedule steps.

Training curves (train/loss, lr, grad_norm, tokens/*, throughput/*) are logged only on
the steps the Trainer writes (`log_every_n_steps`): one `self.log` call costs ~0.6 ms,
2% of a small model's CPU step. `last_loss` and `tokens_seen` are current every step.
Throughput is averaged over the steps since the previous log, training time only.

A step with N = 0 has loss 0: its gradients are dropped (set to None), so AdamW skips
every parameter and its moments and step counts stay as they were.
Callbacks' `on_before_optimizer_step` run before this module's, so they see gradients
before step 2 (off by the positive factor only).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from packlm.model.config import ModelConfig, OptimConfig, as_dict, coerce
from packlm.model.transformer import Transformer

IGNORE_INDEX = -100
COUNTERS = ("input", "nonpad", "supervised", "documents")


class LitCausalLM(L.LightningModule):
    def __init__(
        self,
        model: ModelConfig | Mapping[str, Any] | None = None,
        optim: OptimConfig | Mapping[str, Any] | None = None,
        token_byte_lengths: Sequence[int] | Tensor | None = None,
    ):
        super().__init__()
        self.model_config: ModelConfig = coerce(ModelConfig, model)
        self.optim_config: OptimConfig = coerce(OptimConfig, optim)
        self.save_hyperparameters(
            {"model": as_dict(self.model_config), "optim": as_dict(self.optim_config)}
        )
        self.model = Transformer(self.model_config)
        self.register_buffer("token_byte_lengths", None, persistent=False)
        if token_byte_lengths is not None:
            self.set_token_byte_lengths(token_byte_lengths)
        self.loss_scale = 1.0 / self.model_config.context_length  # s in the module docstring
        self.tokens_seen = dict.fromkeys(COUNTERS, 0)  # cumulative, all ranks, in checkpoints
        self.last_loss = 0.0  # loss of the last optimizer step (logged as train/loss)
        self._cycle: Tensor | None = None  # [nats, supervised, input, nonpad, documents] so far
        self._eval: Tensor | None = None  # [nats, supervised, bytes] of the eval loop so far
        self._t_last: float | None = None  # end of the last step (None after a pause)
        self._window = dict.fromkeys(("seconds", *COUNTERS), 0.0)  # since the last log
        self._step_counts = dict.fromkeys(COUNTERS, 0.0)  # of the last optimizer step

    # --- plumbing -------------------------------------------------------------------------

    def set_token_byte_lengths(self, lengths: Sequence[int] | Tensor) -> None:
        """UTF-8 byte length of each token id (0 for special tokens), for val/bpb."""
        lengths = torch.as_tensor(lengths, dtype=torch.int64, device=self.device)
        if lengths.shape != (self.model_config.vocab_size,):
            raise ValueError(
                f"token_byte_lengths: shape {tuple(lengths.shape)}, expected "
                f"({self.model_config.vocab_size},) = (model.vocab_size,)"
            )
        self.token_byte_lengths = lengths

    @property
    def supervised_tokens_seen(self) -> int:
        """Supervised targets of all completed optimizer steps, all ranks (for a budget callback)."""
        return self.tokens_seen["supervised"]

    def forward(self, input_ids, segment_ids=None, position_ids=None) -> Tensor:
        return self.model(input_ids, segment_ids, position_ids)  # [B, T, V]

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Mark stream batches (all segment ids 0) while they are still on the CPU, so the
        model takes the is_causal path without a device read (masks.is_stream)."""
        seg = batch.get("segment_ids") if isinstance(batch, Mapping) else None
        if seg is not None and seg.device.type == "cpu":
            batch = {**batch, "stream": not bool(seg.any())}
        return batch

    def _sum_ce(self, batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Sum of CE over the supervised targets of a batch (0 if none), and [B, T] target mask."""
        segment_ids = None if batch.get("stream") else batch.get("segment_ids")
        logits = self(batch["input_ids"], segment_ids, batch.get("position_ids"))
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        labels = batch["labels"]  # [B, T]
        sum_ce = F.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        return sum_ce, labels != IGNORE_INDEX

    # --- training -------------------------------------------------------------------------

    def on_train_epoch_start(self) -> None:
        self._t_last = None  # don't count dataloader start-up as step time

    def on_validation_start(self) -> None:
        self._t_last = None  # nor validation

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._t_last is None:
            self._t_last = time.perf_counter()

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        sum_ce, supervised = self._sum_ce(batch)
        stats = torch.stack(
            [sum_ce.detach().double(), supervised.sum().double(), *_token_counts(batch)]
        )  # [5], stays on the device: no sync per micro-batch
        self._cycle = stats if self._cycle is None else self._cycle + stats
        return sum_ce * self.loss_scale

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """End of the accumulation cycle: exact weighting (step 2 above), counters, logs."""
        totals = self.trainer.strategy.reduce(self._cycle, reduce_op="sum")
        nats, n_sup, n_input, n_nonpad, n_docs = totals.tolist()  # the one sync per step
        self._cycle = None
        params = [p for group in optimizer.param_groups for p in group["params"]]
        grads = [p.grad for p in params if p.grad is not None]
        if n_sup > 0:
            A, W = self.trainer.accumulate_grad_batches, self.trainer.world_size
            torch._foreach_mul_(grads, A * W / (self.loss_scale * n_sup))
        else:  # nothing to learn from: AdamW skips parameters without gradient
            for p in params:
                p.grad = None
            grads = []

        self._step_counts = dict(zip(COUNTERS, (n_input, n_nonpad, n_sup, n_docs), strict=True))
        for key, n in self._step_counts.items():
            self.tokens_seen[key] += int(n)
            self._window[key] += n
        now = time.perf_counter()
        self._window["seconds"] += now - (self._t_last or now)
        self._t_last = now

        self.last_loss = nats / n_sup if n_sup > 0 else 0.0
        if self._is_logging_step():  # self.log costs ~0.6 ms a call: log only when written
            self._log_train_state(optimizer, grads)

    def _is_logging_step(self) -> bool:
        """The steps on which the Trainer writes to its loggers (every log_every_n_steps)."""
        every = self.trainer.log_every_n_steps
        return bool(self.trainer.fast_dev_run) or (
            every > 0 and (self.trainer.global_step + 1) % every == 0
        )

    def _log_train_state(self, optimizer: torch.optim.Optimizer, grads: list[Tensor]) -> None:
        """Step loss, lr, grad norm (before clipping), cumulative counts, throughput since the
        last log."""
        self.log(
            "train/loss", self.last_loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=1
        )
        seconds = max(self._window.pop("seconds"), 1e-9)
        logs = {
            "lr": optimizer.param_groups[0]["lr"],
            "grad_norm": _total_norm(grads),
            **{f"tokens/{k}": float(n) for k, n in self.tokens_seen.items()},
            **{f"tokens_per_step/{k}": float(n) for k, n in self._step_counts.items()},
            **{f"throughput/{k}_tokens_per_s": self._window[k] / seconds for k in COUNTERS[:3]},
            "throughput/documents_per_s": self._window["documents"] / seconds,
        }
        self.log_dict(logs, on_step=True, on_epoch=False, batch_size=1)
        self._window = dict.fromkeys(("seconds", *COUNTERS), 0.0)

    # --- validation / test: totals over the whole loop and all ranks ------------------------

    def on_validation_epoch_start(self) -> None:
        self._eval = None

    def on_test_epoch_start(self) -> None:
        self._eval = None

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        sum_ce, supervised = self._sum_ce(batch)
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

    def configure_optimizers(self) -> dict[str, Any]:
        o = self.optim_config
        params = list(self.model.parameters())  # tied weights appear once
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": o.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(
            groups, lr=o.lr, betas=o.betas, eps=o.eps, fused=self.device.type == "cuda"
        )
        total = (
            o.max_steps if o.max_steps is not None else int(self.trainer.estimated_stepping_batches)
        )
        schedule = partial(lr_factor, warmup=o.warmup_steps, total=total, min_ratio=o.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    # --- checkpoints ----------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["packlm_tokens_seen"] = dict(self.tokens_seen)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.tokens_seen.update(checkpoint.get("packlm_tokens_seen", {}))


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier of the peak lr at optimizer step `step` (0-based): linear warmup, then a
    cosine from 1 down to min_ratio at step `total`, flat after."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _token_counts(batch: Mapping[str, Tensor]) -> list[Tensor]:
    """[input, nonpad, documents] of a batch as float64 device scalars (DESIGN "The batch").

    documents = distinct (row, segment) pairs with segment >= 0; segment ids are < T
    (document index inside the row), so one scatter into [B, T + 1] counts them without
    reading anything back from the device.
    """
    input_ids = batch["input_ids"]
    B, T = input_ids.shape
    device = input_ids.device
    n_input = torch.full((), B * T, dtype=torch.float64, device=device)
    seg = batch.get("segment_ids")
    if seg is None:  # one document per row, no PAD
        return [n_input, n_input.clone(), torch.full((), B, dtype=torch.float64, device=device)]
    n_nonpad = (seg >= 0).sum().double()
    present = torch.zeros(B, T + 1, dtype=torch.bool, device=device)
    present.scatter_(1, torch.where(seg >= 0, seg, T).long(), True)  # PAD -> column T
    n_docs = present[:, :T].sum().double()
    return [n_input, n_nonpad, n_docs]


def _total_norm(grads: list[Tensor]) -> Tensor | float:
    """L2 norm of all gradients together (torch.nn.utils.get_total_norm needs torch >= 2.6)."""
    if not grads:
        return 0.0
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
