"""Log what each optimizer step did: loss, lr, grad norm, token counts and throughput.

The LightningModule computes a step's totals (`last_step`, `last_loss`, `last_grad_norm`,
the cumulative `tokens_seen`); this callback writes them on the steps the Trainer logs
(`log_every_n_steps`): one `log` call costs ~0.6 ms, 2% of a small model's CPU step.
Throughput is averaged over the steps since the previous log, training time only (the
clock pauses for dataloader start-up and validation). Under data.curriculum the phase's
window and stride are logged too (`data/window`, `data/stride`).

`tokens/supervised_by_source/<name>`: the supervised tokens trained from each store source
so far (<name>: the source's one name in every tag, `packlm.config.sources.source_tag_names`;
the checkpoint keeps them by the store's own names, its sources' paths), read against the
mixture's weights; counted from each batch's `source_ids` (built by
the loader's workers, `packlm.batch`) on the device without a host sync, summed over the
ranks once per optimizer step, kept in the checkpoint; they sum exactly to tokens/supervised.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch

from packlm.batch import IGNORE_INDEX, SOURCE_KEY
from packlm.config.sources import split_source_names
from packlm.model.loss import COUNTS

BY_SOURCE = "tokens/supervised_by_source/"


class StepMetrics(L.Callback):
    def __init__(self) -> None:
        self._t_last: float | None = None  # end of the last step (None after a pause)
        self._seen_step = -1  # the global step whose totals were counted last
        self._since_log = dict.fromkeys(("seconds", *COUNTS), 0.0)
        self.source_names: list[str] | None = None  # the training store's sources
        self.tag_names: list[str] | None = None  # their names in the tags (None: the same)
        self._by_source: torch.Tensor | None = None  # int64 [sources]: all ranks, so far
        self._pending: torch.Tensor | None = None  # this rank's, since the last step
        self._restored: dict[str, int] = {}  # a checkpoint's counts

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._seen_step = trainer.global_step  # a resumed run starts past its checkpoint
        datamodule = getattr(trainer, "datamodule", None)
        if self.source_names is None and hasattr(datamodule, "store"):
            self.source_names = list(datamodule.store("train").source_names)
            data = getattr(datamodule, "data", None)
            self.tag_names = split_source_names(data, "train", self.source_names)

    def state_dict(self) -> dict[str, Any]:
        if self._by_source is None:
            return {"supervised_by_source": dict(self._restored)}
        counts = self._by_source.tolist()
        return {"supervised_by_source": dict(zip(self.source_names, counts, strict=True))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restored = dict(state.get("supervised_by_source", {}))

    def _count_sources(self, trainer: L.Trainer, batch: Any, step_done: bool) -> None:
        """Add the batch's supervised tokens per source (device-side scatter, no sync); at the
        end of an optimizer step, sum this rank's over all ranks into the running totals."""
        names = self.source_names
        if not names or not isinstance(batch, dict) or SOURCE_KEY not in batch:
            return
        labels, sources = batch["labels"], batch[SOURCE_KEY]
        if self._pending is None:
            self._pending = torch.zeros(len(names), dtype=torch.int64, device=labels.device)
            restored = [int(self._restored.get(n, 0)) for n in names]
            self._by_source = torch.tensor(restored, dtype=torch.int64, device=labels.device)
        supervised = (labels != IGNORE_INDEX).flatten().to(torch.int64)
        self._pending.scatter_add_(0, sources.flatten().long().clamp(min=0), supervised)
        if step_done:
            self._by_source += trainer.strategy.reduce(self._pending, reduce_op="sum")
            self._pending.zero_()

    def _source_logs(self) -> dict[str, float]:
        if self._by_source is None:
            return {}
        counts, names = self._by_source.tolist(), self.tag_names or self.source_names
        return {BY_SOURCE + n: float(c) for n, c in zip(names, counts, strict=True)}

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t_last = None  # don't count dataloader start-up as step time

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t_last = None  # nor validation

    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int) -> None:
        if self._t_last is None:
            self._t_last = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self._count_sources(trainer, batch, trainer.global_step != self._seen_step)
        if trainer.global_step == self._seen_step:  # inside an accumulation cycle
            return
        self._seen_step = trainer.global_step
        now = time.perf_counter()
        self._since_log["seconds"] += now - (self._t_last or now)
        self._t_last = now
        step = pl_module.last_step
        for key, n in step.counts().items():
            self._since_log[key] += n
        if self._is_logging_step(trainer):
            self._log(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Steps since the last logging step still reach the loggers as cumulative counts, so
        the last `tokens/*` point (HParams' column, `packlm.compare`) is the run's total, the
        one the terminal summary prints."""
        if not any(self._since_log[k] for k in COUNTS):
            return
        counts = {f"tokens/{k}": float(n) for k, n in pl_module.tokens_seen.items()}
        counts.update(self._source_logs())
        for logger in trainer.loggers:  # Lightning's index of the k-th optimizer step is k-1
            logger.log_metrics(counts, step=trainer.global_step - 1)
        self._since_log = dict.fromkeys(("seconds", *COUNTS), 0.0)

    @staticmethod
    def _is_logging_step(trainer: L.Trainer) -> bool:
        return is_logging_step(trainer, trainer.global_step)

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Step loss, lr, grad norm (before clipping), cumulative and per-step counts,
        throughput since the last log."""
        pl_module.log(
            "train/loss", pl_module.last_loss, prog_bar=True, on_step=True, on_epoch=False,
            batch_size=1,
        )  # fmt: skip
        since = self._since_log
        seconds = max(since["seconds"], 1e-9)
        logs = {
            "lr": trainer.optimizers[0].param_groups[0]["lr"],
            "grad_norm": pl_module.last_grad_norm,
            **{f"tokens/{k}": float(n) for k, n in pl_module.tokens_seen.items()},
            **{f"tokens_per_step/{k}": float(n) for k, n in pl_module.last_step.counts().items()},
            "tokens/supervised_fraction": supervised_fraction(pl_module.tokens_seen),
            **{f"throughput/{k}_tokens_per_s": since[k] / seconds for k in COUNTS[:3]},
            "throughput/documents_per_s": since["documents"] / seconds,
            "attention/useful_fraction": pl_module.last_step.attention_useful_fraction,
        }
        logs.update(self._source_logs())
        logs.update(curriculum_phase(trainer, pl_module))
        if pl_module.model_config.loss_weighting == "document":  # train/loss is per document
            logs["train/loss_per_token"] = pl_module.last_step.loss
        pl_module.log_dict(logs, on_step=True, on_epoch=False, batch_size=1)
        pl_module.log(  # supervised tokens/s on the progress bar only
            "tok/s", since["supervised"] / seconds, prog_bar=True, logger=False, on_step=True,
            on_epoch=False, batch_size=1,
        )  # fmt: skip
        self._since_log = dict.fromkeys(("seconds", *COUNTS), 0.0)


def is_logging_step(trainer: L.Trainer, step: int) -> bool:
    """Whether the Trainer writes to its loggers when global_step has become `step` (every
    log_every_n_steps; every step under fast_dev_run)."""
    every = trainer.log_every_n_steps
    return bool(trainer.fast_dev_run) or (every > 0 and step % every == 0)


def curriculum_phase(trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
    """data/window and data/stride of this step's curriculum phase (none without one): the
    phase of the tokens trained before the step (with accumulation: of its first micro-batch)."""
    datamodule = getattr(trainer, "datamodule", None)
    if not getattr(getattr(datamodule, "data", None), "curriculum", None):
        return {}
    before = pl_module.tokens_seen["supervised"] - pl_module.last_step.supervised
    phase = datamodule.phase_at(before)
    return {"data/window": float(phase.window), "data/stride": float(phase.stride)}


def supervised_fraction(seen: dict[str, int]) -> float:
    """Supervised targets per non-pad token so far: 1 for plain text with a target after
    every token, the assistants' share of the tokens for conversations (docs/conversations.md)."""
    return float(seen["supervised"]) / max(float(seen["nonpad"]), 1.0)
