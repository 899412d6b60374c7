"""The LightningDataModule: config -> tokenizer + stores -> per-epoch plans -> batches.

Use it from any Lightning code: `PackedDataModule(sources=[...], window=256, ...)` (the
`data.*` keys, `tokenizer`, `cache_dir`), then `trainer.fit(module, datamodule=dm)` with a
plain `lightning.Trainer`. What it needs from the Trainer it sets or checks itself:
- `reload_dataloaders_every_n_epochs=1`: an epoch's number of batches depends on its
  offsets and packs, and Lightning reads the length only when it (re)loads the dataloader,
  so an epoch longer than the first would be cut. `setup` sets Lightning's default 0 to 1;
  any other value is a ConfigError.
- `use_distributed_sampler=False` under a distributed strategy: the plan is sharded by rank
  here, and Lightning's sampler replacement would shard it a second time. Lightning keeps
  that flag private, so the replacement itself is refused: `PlanDataLoader` raises a
  ConfigError naming the flag when it is rebuilt around another sampler.
The train DataLoader is stateful (`state_dict`), so checkpoints resume mid-epoch exactly.
data.skip_documents / data.skip_steps (`packlm.data.skip`) are resolved and logged at setup
(an unknown document right after the store opens) and counted in every epoch's statistics.
With data.curriculum the data position is also this module's state: Lightning reads the
epoch's length before it restores the loader, and that length depends on the phase.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch

from packlm.batch import with_counts
from packlm.data.epoch import curriculum
from packlm.data.epoch.collate import mark_stream
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset, plan_signature
from packlm.data.epoch.mixture.sampler import MixtureSampler, mixture_line
from packlm.data.epoch.sampler import PlanSampler
from packlm.data.epoch.windows import validation_config
from packlm.data.plan_logging import check_epoch_length, log_plan_statistics
from packlm.data.plans import EpochPlans
from packlm.data.skip import StepSkips, document_counts
from packlm.errors import ConfigError
from packlm.runtime.shims import start_the_epoch_after_a_last_batch_checkpoint

log = logging.getLogger(__name__)


class PackedDataModule(EpochPlans, L.LightningDataModule):
    """Batches of `packlm.batch` from `data.*` (the plans of `EpochPlans`, with its arguments:
    the data keys as keyword arguments, as Hydra's `_target_` does, or `data=DataConfig(...)`).
    `varlen=True` adds `cu_seqlens` and `max_seqlen` (varlen attention kernels) to each batch."""

    def __init__(self, *args: Any, varlen: bool = False, **kwargs: Any):
        L.LightningDataModule.__init__(self)
        EpochPlans.__init__(self, *args, **kwargs)
        self.varlen = varlen
        self._position = curriculum.Position()  # training's, shared by the epochs' samplers
        self._logged_epochs: set[int] = set()
        self._train_sampler: PlanSampler | None = None

    def __getstate__(self) -> dict[str, Any]:
        return dict(super().__getstate__(), _train_sampler=None)

    def state_dict(self) -> dict[str, Any]:
        """The data position: restored before Lightning reads the epoch's length, which
        depends on the curriculum phase (the loader's own state comes after)."""
        return {"position": self._position.as_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "position" in state:
            self._position.set(curriculum.Position(**state["position"]))

    def expected_supervised_tokens(self, batches: float) -> float:
        """Expected supervised targets (all ranks) after `batches` global batches, through the
        curriculum's phases (the lr schedule's token horizon)."""
        world = self._rank_world()[1]
        if self.mixture:
            accumulate = getattr(self.trainer, "accumulate_grad_batches", 1)
            return self.mixture_rates(self.data.batch_size * world, accumulate).tokens(batches)
        rates = [self.supervised_tokens_per_batch(p) * world for p in range(len(self.phases))]
        return curriculum.expected_tokens(self.phases, rates, batches)

    def setup(self, stage: str | None = None) -> None:
        """Open the stores; under a Trainer, make it reload the loaders every epoch."""
        super().setup(stage)
        trainer = self.trainer
        if stage is None:  # the plans' own calls (store())
            return
        self.skipped_documents()  # an unknown one fails now, right after the store opens
        if trainer is None:
            return
        self._check_skips(trainer)
        reload = trainer.reload_dataloaders_every_n_epochs
        if reload == 0:  # Lightning's default: the first epoch's length would be kept
            trainer.reload_dataloaders_every_n_epochs = 1
        elif reload != 1:
            raise ConfigError(
                f"PackedDataModule: the Trainer has reload_dataloaders_every_n_epochs={reload}; "
                "every epoch has its own plan and length, so create it with "
                "reload_dataloaders_every_n_epochs=1 (or leave it at its default)"
            )

    def _check_skips(self, trainer: L.Trainer) -> None:
        """Refuse data.skip_steps under limit_train_batches; say what is skipped (rank 0)."""
        docs, steps = self.skipped_documents(), self.data.skip_steps
        if not (len(docs) or steps):
            return
        limit = trainer.limit_train_batches
        if steps and limit is not None and not (isinstance(limit, float) and limit >= 1.0):
            raise ConfigError(
                f"data.skip_steps: not with trainer.limit_train_batches={limit} (the steps are "
                "numbered over whole epochs)"
            )
        if trainer.is_global_zero:
            store, shown = self.store("train"), docs[:5].tolist()
            names = ", ".join(f"{d} ({store.doc_id(d)})" for d in shown)
            tokens = int(self._lengths["train"][docs].sum())
            log.info(
                "skipping %d document(s) [%s%s] (%s tokens, their labels dropped wherever "
                "they are read) and %d step(s) %s (%d global batch(es) each)",
                len(docs), names, ", ..." if len(docs) > len(shown) else "", f"{tokens:,}",
                len(steps), sorted(steps), trainer.accumulate_grad_batches,
            )  # fmt: skip

    def _step_skips(self) -> StepSkips:
        """data.skip_steps in the Trainer's steps (a stand-in without the setting: 1 batch)."""
        accumulate = getattr(self.trainer, "accumulate_grad_batches", 1)
        return StepSkips.of(self.data.skip_steps, accumulate)

    # --- dataloaders ---------------------------------------------------------------------
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Read on the CPU what the step needs, so that it reads nothing from the device:
        whether the rows are stream rows (`collate.mark_stream`) and, for training, the
        counts (`packlm.batch.with_counts`; ExactStepLoss reads them instead of the device)."""
        batch = mark_stream(batch)
        return with_counts(batch) if getattr(self.trainer, "training", False) else batch

    def train_dataloader(self) -> PlanDataLoader:
        if isinstance(self.trainer, L.Trainer):  # before the epoch is read: it may move on
            start_the_epoch_after_a_last_batch_checkpoint(self.trainer)
        rank, world = self._rank_world()
        shared = dict(
            rank=rank, world_size=world, epoch=self._trainer_epoch(),
            on_epoch=self._on_train_epoch, position=self._position,
            skip_documents=self.skipped_documents(), skip_steps=self._step_skips(),
        )  # fmt: skip
        if self.mixture:
            accumulate = getattr(self.trainer, "accumulate_grad_batches", 1)
            streams = self.streams(self.data.batch_size * world, accumulate)
            sampler = MixtureSampler(streams, self.data.batch_size, **shared)
            if self._train_sampler is None and rank == 0:
                log.info("%s", mixture_line(streams, accumulate))
        else:
            sampler = PlanSampler(
                lambda e, p=None: self.plan(e, "train", p), self.data.batch_size,
                phases=self.phases if self.data.curriculum else None, **shared,
            )  # fmt: skip
        self._train_sampler = sampler
        return self._loader("train", sampler)

    def val_dataloader(self) -> PlanDataLoader:
        rank, world = self._rank_world()
        sampler = PlanSampler(lambda e: self.plan(0, "val"), self.data.batch_size, rank, world)
        return self._loader("val", sampler)

    def _loader(self, split: str, sampler: PlanSampler) -> PlanDataLoader:
        store = self.store(split)
        cfg = self.data if split == "train" else validation_config(self.data)
        bos, weights = store.eos_id if cfg.bos else None, self.source_weights
        dataset = WindowDataset(store.path, cfg.window, store.pad_id, bos, split == "val",
                                cfg.chat_supervised)  # fmt: skip
        signature = plan_signature(cfg, store, weights if split == "train" else None)
        # keywords only: a rebuild by Lightning then reaches PlanDataLoader's sampler check
        return PlanDataLoader(
            dataset=dataset, sampler=sampler, packing=cfg.packing, signature=signature,
            num_workers=self.data.num_workers, varlen=self.varlen,
            mixture_may_change=self.data.mixture_change_on_resume,
        )  # fmt: skip

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is not None:
            return trainer.global_rank, trainer.world_size
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def _trainer_epoch(self) -> int:
        """The epoch Lightning is about to run (it passes the same number to set_epoch)."""
        if self.trainer is None:
            return 0
        return self.trainer.fit_loop.epoch_progress.current.processed

    # --- per-epoch statistics ------------------------------------------------------------
    def _on_train_epoch(self, epoch: int) -> None:
        if epoch in self._logged_epochs or self.trainer is None:
            return
        self._logged_epochs.add(epoch)
        check_epoch_length(self.trainer, self._train_sampler, epoch)
        if self.trainer.is_global_zero and self.trainer.loggers:
            self.log_plan_statistics(epoch)
        if self.trainer.is_global_zero:
            self.log_skips(epoch)

    def log_skips(self, epoch: int) -> dict[str, int]:
        """This epoch's share of data.skip_documents / data.skip_steps, logged and returned
        (`data/skipped_*` to the loggers); nothing when neither is set. Under a curriculum the
        documents are counted in the plan of the phase the epoch starts in."""
        docs, sampler = self.skipped_documents(), self._train_sampler
        if not (len(docs) or self.data.skip_steps) or sampler is None:
            return {}
        samples, tokens = document_counts(self.plan(epoch, "train", self._position.phase), docs)
        at, total = sampler.position, sum(s.batches for s in sampler.segments())
        first = at.batch + at.dropped
        batches = sampler.skip_steps.count(at.steps, first, first + total)
        counts = {"document_samples": samples, "document_tokens": tokens, "batches": batches}
        log.info(
            "epoch %d: %d sample(s) read %s token(s) of the skipped documents (not supervised);"
            " %d global batch(es) (%s samples) of skipped steps are left out", epoch, samples,
            f"{tokens:,}", batches, f"{batches * sampler.step:,}",
        )  # fmt: skip
        for logger in self.trainer.loggers:
            scalars = {f"data/skipped_{k}": float(v) for k, v in counts.items()}
            logger.log_metrics(scalars, step=self.trainer.global_step)
        return counts

    def log_plan_statistics(self, epoch: int) -> dict[str, Any]:
        """The few statistics worth a line over epochs to the loggers (`data/...`, table:
        `packlm.callbacks.EpochStatistics`), histograms to TensorBoard; returns them all.
        Under a curriculum: the statistics of the phase the epoch starts in."""
        stats = self.plan_statistics(epoch, phase=self._position.phase)
        log_plan_statistics(self.trainer, stats)
        return stats
