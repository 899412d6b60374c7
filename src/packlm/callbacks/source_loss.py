"""Loss by source and the hardest validation documents, from the per-target cross-entropy
the loss already computed (`LitCausalLM.last_target_ce`; `packlm.model.source_loss`).

- `Loss/train_by_source/<name>`, on the steps the Trainer logs (log_every_n_steps, as
  train/loss): a source's sum of CE over its supervised targets in the whole optimizer step
  (every micro-batch of the accumulation cycle, every rank: one all-reduce of [3, sources])
  / its targets in the step. Only the logged steps are summed: the others cost nothing.
  <name> is the source's one name in every tag (`packlm.config.sources.source_tag_names`:
  its `name:`, else its path's stem). A mixture's shares: `packlm.callbacks.MixtureChart`.
- `Loss/val_by_source/<name>`, after each validation: the same over the whole validation
  set, all ranks.
  Both only where the split's store has more than one source (several data.sources); the
  source losses weighted by their targets sum to train/loss (train/loss_per_token under
  model.loss_weighting=document) and to val/loss.
- `validation/hardest_documents` (TensorBoard's Text tab), after each validation of the
  fit or `trainer.validate` (not the sanity check), at the global step: the ten validation
  documents with the highest loss, a table of `packlm.evaluation.document_losses` (loss, bpb, targets,
  source, store index and id as `python -m packlm.trace` prints them, the text's start).
  It ranks what validation scored: each document's targets in the validation windows, the
  per-target CE of val/loss (a document cut by a window edge without its earlier part as
  context), and its caption says so. Whole documents (`evaluate per_document=true`) would
  need a second forward pass over the split, 2.2x to 3.0x a validation's cost (measured in
  docs/trace.md), so the table keeps the windows. Each validation adds one [3, documents]
  all-reduce; nothing without a TensorBoard logger.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import lightning as L
import numpy as np

from packlm.batch import DOCUMENT_KEY, SOURCE_KEY
from packlm.callbacks.step_metrics import is_logging_step
from packlm.callbacks.views.tensorboard import tensorboard_logger
from packlm.config.sources import split_source_names
from packlm.model.source_loss import GroupTotals, group_losses

TRAIN = "Loss/train_by_source/"
VAL = "Loss/val_by_source/"
HARDEST = "validation/hardest_documents"
EXCERPT = 80  # characters of a hardest document's text shown


class SourceLosses(L.Callback):
    """See the module doc. The source names and the validation store come from the
    datamodule's stores (`PackedDataModule.store`) unless set (`train_sources`,
    `val_sources`, `val_store`: for a plain DataLoader)."""

    def __init__(self, tokenizer: Any = None, hardest: int = 10, bos: bool = False):
        self.tokenizer = tokenizer  # decodes the hardest documents' excerpts (None: none)
        self.hardest = hardest
        self.bos = bos  # data.bos: a document's tokens as the plan counts them
        self.train_sources: list[str] | None = None
        self.val_sources: list[str] | None = None
        self.val_store: Any = None
        self._train: GroupTotals | None = None
        self._val: GroupTotals | None = None
        self._docs: GroupTotals | None = None
        self._seen_step = -1

    def _store(self, trainer: L.Trainer, split: str) -> Any:
        datamodule = getattr(trainer, "datamodule", None)
        return datamodule.store(split) if hasattr(datamodule, "store") else None

    def _names(self, trainer: L.Trainer, split: str, store: Any) -> list[str]:
        """The tag names of the split store's sources (`split_source_names`)."""
        data = getattr(getattr(trainer, "datamodule", None), "data", None)
        return split_source_names(data, split, list(store.source_names))

    # --- training -------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._seen_step = trainer.global_step  # a resumed run starts past its checkpoint
        if self.train_sources is None and (store := self._store(trainer, "train")) is not None:
            self.train_sources = self._names(trainer, "train", store)
        many = self.train_sources is not None and len(self.train_sources) > 1
        self._train = GroupTotals(len(self.train_sources)) if many else None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        done = trainer.global_step != self._seen_step  # this micro-batch ended a step
        self._seen_step = trainer.global_step
        step = trainer.global_step if done else trainer.global_step + 1  # the step it is in
        if self._train is None or not is_logging_step(trainer, step):
            return
        ce = getattr(pl_module, "last_target_ce", None)
        if ce is not None and isinstance(batch, Mapping) and SOURCE_KEY in batch:
            self._train.add(ce, batch["labels"], batch[SOURCE_KEY])
        if done:
            totals = self._train.take(_sum(trainer), pl_module.device)
            logs = _named(TRAIN, self.train_sources, group_losses(totals))
            pl_module.log_dict(logs, on_step=True, on_epoch=False, batch_size=1)

    # --- validation -----------------------------------------------------------------------
    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val = self._docs = None
        if trainer.sanity_checking:
            return
        store = self.val_store if self.val_store is not None else self._store(trainer, "val")
        self.val_store = store
        if self.val_sources is None and store is not None:
            self.val_sources = self._names(trainer, "val", store)
        if self.val_sources is not None and len(self.val_sources) > 1:
            self._val = GroupTotals(len(self.val_sources))
        if self.hardest > 0 and store is not None and tensorboard_logger(trainer) is not None:
            self._docs = GroupTotals(store.n_docs)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int,
                                dataloader_idx: int = 0) -> None:  # fmt: skip
        ce = getattr(pl_module, "last_target_ce", None)
        if ce is None or not isinstance(batch, Mapping):
            return
        if self._val is not None and SOURCE_KEY in batch:
            self._val.add(ce, batch["labels"], batch[SOURCE_KEY])
        if self._docs is not None and DOCUMENT_KEY in batch:
            byte_lengths = getattr(pl_module, "token_byte_lengths", None)
            self._docs.add(ce, batch["labels"], batch[DOCUMENT_KEY], byte_lengths)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._val is not None:
            totals = self._val.take(_sum(trainer), pl_module.device)
            logs = _named(VAL, self.val_sources, group_losses(totals))
            # already global; sync_dist averages equal numbers (keeps the ranks agreeing)
            pl_module.log_dict(logs, on_step=False, on_epoch=True, sync_dist=True, batch_size=1)
        if self._docs is not None:
            nats, targets, n_bytes = self._docs.take(_sum(trainer), pl_module.device).cpu().numpy()
            if trainer.is_global_zero:
                self._show_hardest(trainer, nats, targets, n_bytes)
        self._val = self._docs = None

    def _show_hardest(self, trainer, nats, targets, n_bytes) -> None:
        from packlm.evaluation.document_losses import (
            document_table,
            hardest_markdown,
            windows_caption,
        )

        store = self.val_store
        table = document_table(store, nats, targets, n_bytes, self.bos, limit=self.hardest)
        data = getattr(getattr(trainer, "datamodule", None), "data", None)
        caption = windows_caption(getattr(data, "window", None), getattr(data, "packing", None))
        text = hardest_markdown(
            table, self.hardest, self._excerpt if self.tokenizer else None, caption
        )
        tensorboard_logger(trainer).experiment.add_text(HARDEST, text, trainer.global_step)

    def _excerpt(self, document: int) -> str:
        ids = np.asarray(self.val_store.document(document)[: EXCERPT // 2], dtype=np.int64)
        return self.tokenizer.decode(ids.tolist())[:EXCERPT]


def _sum(trainer: L.Trainer):
    return partial(trainer.strategy.reduce, reduce_op="sum")


def _named(prefix: str, names: list[str], losses: list[float | None]) -> dict[str, float]:
    """{prefix + name: loss} of the sources with a target."""
    return {prefix + n: v for n, v in zip(names, losses, strict=True) if v is not None}
