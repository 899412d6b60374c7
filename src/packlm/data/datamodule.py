"""The LightningDataModule: config -> tokenizer + stores -> per-epoch plans -> batches.

Trainer requirements (train.py sets them):
- `use_distributed_sampler=False`: the plan is sharded by rank here; Lightning's sampler
  replacement would shard it a second time.
- `reload_dataloaders_every_n_epochs=1` when several epochs run: an epoch's number of
  batches depends on its offsets and packs, and Lightning reads the length only when it
  (re)loads the dataloader; otherwise an epoch longer than the first is cut (logged).
The train DataLoader is stateful (`state_dict`), so checkpoints resume mid-epoch exactly.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from packlm.data.config import DataConfig, source_weight
from packlm.data.epoch.collate import mark_stream
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset, plan_signature
from packlm.data.epoch.order import directory_groups
from packlm.data.epoch.plan import EpochPlan, build_plan
from packlm.data.epoch.sampler import PlanSampler
from packlm.data.epoch.statistics import plan_statistics
from packlm.data.epoch.windows import validation_config
from packlm.data.store.cache import DEFAULT_CACHE_DIR
from packlm.data.store.token_store import TokenStore
from packlm.errors import ConfigError
from packlm.tokenizer.config import TokenizerConfig

log = logging.getLogger(__name__)

EPOCH_LINES = ("epoch", "samples", "supervised_tokens", "fill_ratio", "supervised_ratio")
EPOCH_LINES += ("target_multiplicity_mean", "never_target_fraction", "overlap_ratio")
SOURCE_LINES = ("samples", "supervised_tokens")  # statistics as lines over epochs, per source


class PackedDataModule(L.LightningDataModule):
    """Batches of DESIGN.md from `data.*`; build with the data keys as keyword arguments
    (`PackedDataModule(window=128, ...)`, as Hydra's `_target_` does) or `data=DataConfig(...)`.

    `prepared` (a `packlm.data.store.cache.PreparedData`) skips building: tests and tools that
    already have stores pass it.
    """

    def __init__(
        self,
        tokenizer: TokenizerConfig | Mapping | None = None,
        cache_dir: str | Path = DEFAULT_CACHE_DIR,
        model_context: int | None = None,
        data: DataConfig | None = None,
        prepared: Any = None,
        progress: bool = True,
        **data_keys: Any,
    ):
        super().__init__()
        if data_keys:  # Hydra's instantiate, or keyword arguments
            data = DataConfig.from_mapping({**(asdict(data) if data else {}), **data_keys})
        self.data = DataConfig.from_mapping(data).validate(model_context)
        self.tokenizer_config = TokenizerConfig.from_mapping(tokenizer)
        self.cache_dir = Path(cache_dir)
        self.progress = progress
        self.prepared = prepared
        if self.data.stride > self.data.window:
            d = self.data
            log.warning(
                "data.stride=%d > data.window=%d: %d tokens between windows are never a target",
                d.stride, d.window, d.stride - d.window,
            )  # fmt: skip
        self._stores: dict[str, TokenStore] = {}
        self._lengths: dict[str, np.ndarray] = {}
        self._plans: dict[tuple[str, int], EpochPlan] = {}
        self._logged_epochs: set[int] = set()
        self._stats: dict[tuple[str, int], dict[str, Any]] = {}  # the latest epoch's only
        self._train_sampler: PlanSampler | None = None

    @classmethod
    def from_config(cls, config: Any, cache_dir: str | Path, **kwargs: Any) -> PackedDataModule:
        """The DataModule of a validated config (`packlm.config.Validated`: data, tokenizer,
        model), as train.py and stats build it."""
        return cls(
            tokenizer=config.tokenizer,
            cache_dir=cache_dir,
            model_context=config.model.context_length,
            data=config.data,
            **kwargs,
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (spawned processes): open stores and plans are rebuilt, never copied."""
        state = dict(self.__dict__)
        state.update(_stores={}, _lengths={}, _plans={}, _train_sampler=None)
        return state

    # --- preparation -------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Train or load the tokenizer and build the stores (cached; Lightning: once per node)."""
        if self.prepared is None:
            from packlm.data.store.cache import prepare_stores

            self.prepared = prepare_stores(
                self.data, self.tokenizer_config, self.cache_dir, self.progress
            )

    def setup(self, stage: str | None = None) -> None:
        """Open the stores (every process); cheap when already done."""
        self.prepare_data()
        for split, path in (("train", self.prepared.train_dir), ("val", self.prepared.val_dir)):
            if split not in self._stores:
                store = TokenStore.open(path)
                self._stores[split] = store
                lengths = np.diff(np.asarray(store.doc_offsets))  # int64 [n_docs], EOS included
                self._lengths[split] = lengths + 1 if self.data.bos else lengths  # + the BOS

    def store(self, split: str = "train") -> TokenStore:
        self.setup()
        return self._stores[split]

    @property
    def tokenizer(self) -> Any:
        self.prepare_data()
        return self.prepared.tokenizer

    @property
    def vocab_size(self) -> int:
        tok = self.tokenizer
        return int(tok.vocab_size if tok is not None else self.store().manifest["vocab_size"])

    @property
    def pad_id(self) -> int:
        return self.store().pad_id

    @property
    def eos_id(self) -> int:
        return self.store().eos_id

    @property
    def token_byte_lengths(self) -> Any:
        """UTF-8 bytes of each token id (for bits per byte)."""
        return self.tokenizer.token_byte_lengths()

    @property
    def source_weights(self) -> list[float]:
        return [source_weight(e) for e in self.data.sources]

    # --- plans ---------------------------------------------------------------------------
    def plan(self, epoch: int, split: str = "train") -> EpochPlan:
        """The epoch plan of a split (validation: the fixed windows, the same every epoch)."""
        key = (split, 0 if split == "val" else epoch)
        if key not in self._plans:
            self.setup()
            if split == "val":
                plan = build_plan(self._lengths["val"], validation_config(self.data), 0)
            else:
                store = self._stores["train"]
                plan = build_plan(
                    self._lengths["train"],
                    self.data,
                    epoch,
                    np.asarray(store.doc_sources),
                    self.source_weights,
                    self._doc_groups(store),
                )
            # keep one plan per split
            self._plans = {k: v for k, v in self._plans.items() if k[0] != split}
            self._plans[key] = plan
        return self._plans[key]

    def _doc_groups(self, store: TokenStore) -> np.ndarray | None:
        """The group of each training document under data.group_by (None: no grouping)."""
        if self.data.group_by == "source":
            return np.asarray(store.doc_sources)
        if self.data.group_by == "directory" and "directory" not in self._lengths:
            ids = [store.doc_id(d) for d in range(store.n_docs)]  # once, not every epoch
            self._lengths["directory"] = directory_groups(ids)  # kept with the store arrays
        return self._lengths.get("directory")
        return None

    def plan_statistics(self, epoch: int, split: str = "train") -> dict[str, Any]:
        """`packlm.data.epoch.statistics.plan_statistics` of one epoch, with per-source counts (cached:
        the token budget and the epoch's logging both ask for epoch 0)."""
        key = (split, epoch)
        if key not in self._stats:
            store = self.store(split)
            plan = self.plan(epoch, split)
            self._stats = {
                key: plan_statistics(plan, np.asarray(store.doc_sources), store.source_names)
            }
        return self._stats[key]

    def supervised_tokens_per_batch(self) -> float:
        """Expected supervised targets in one batch of one rank (sizes token budgets)."""
        stats = self.plan_statistics(0)
        return stats["supervised_tokens"] / max(stats["samples"], 1) * self.data.batch_size

    # --- dataloaders ---------------------------------------------------------------------
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Stream batches are marked on the CPU (`collate.mark_stream`): no device read."""
        return mark_stream(batch)

    def train_dataloader(self) -> PlanDataLoader:
        rank, world = self._rank_world()
        sampler = PlanSampler(
            lambda e: self.plan(e, "train"),
            self.data.batch_size,
            rank,
            world,
            epoch=self._trainer_epoch(),
            on_epoch=self._on_train_epoch,
        )
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
        dataset = WindowDataset(store.path, cfg.window, store.pad_id, bos)
        signature = plan_signature(cfg, store, weights if split == "train" else None)
        return PlanDataLoader(dataset, sampler, cfg.packing, signature, self.data.num_workers)

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is not None:
            if trainer.world_size > 1 and trainer._accelerator_connector.use_distributed_sampler:
                raise ConfigError(
                    "PackedDataModule shards the epoch plan itself: create the Trainer with "
                    "use_distributed_sampler=False"
                )
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
        self._check_epoch_length(epoch)
        if self.trainer.is_global_zero and self.trainer.loggers:
            self.log_plan_statistics(epoch)

    def log_plan_statistics(self, epoch: int) -> dict[str, Any]:
        """The few statistics worth a line over epochs to the loggers (`data/...`, table:
        `packlm.callbacks.EpochStatistics`), histograms to TensorBoard; returns them all."""
        stats = self.plan_statistics(epoch)
        step = self.trainer.global_step
        scalars = {f"data/{k}": float(stats[k]) for k in EPOCH_LINES}
        for index, (name, counts) in enumerate(stats.get("sources", {}).items()):
            tag = f"data/source/{_tag_name(index, name)}"
            scalars.update({f"{tag}/{k}": float(counts[k]) for k in SOURCE_LINES})
        for logger in self.trainer.loggers:
            logger.log_metrics(scalars, step=step)
            writer = getattr(logger, "experiment", None)
            if hasattr(writer, "add_histogram_raw"):
                for name, h in stats["histograms"].items():
                    if h.num:
                        writer.add_histogram_raw(
                            f"data/{name}", h.min, h.max, h.num, h.sum, h.sum_squares,
                            h.edges[1:].tolist(), h.counts.tolist(), global_step=step,
                        )  # fmt: skip
        return stats

    def _check_epoch_length(self, epoch: int) -> None:
        trainer, sampler = self.trainer, self._train_sampler
        limit, reload = trainer.num_training_batches, trainer.reload_dataloaders_every_n_epochs
        if sampler is None or not math.isfinite(limit) or reload == 1 or len(sampler) <= limit:
            return
        log.warning(
            "epoch %d has %d batches but Lightning will stop it after %d (the length it read at "
            "the first epoch); create the Trainer with reload_dataloaders_every_n_epochs=1",
            epoch, len(sampler), limit,
        )  # fmt: skip


def _tag_name(index: int, name: str) -> str:
    """A short TensorBoard-safe name for a source: `1_c.jsonl` for `/long/path/c.jsonl`."""
    leaf = name.rstrip("/").rsplit("/", 1)[-1] or name
    return f"{index}_" + re.sub(r"[^A-Za-z0-9_.*-]+", "_", leaf).strip("_")
