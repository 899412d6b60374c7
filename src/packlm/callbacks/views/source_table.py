"""Text `data/sources`: which path each source name in the tags stands for, once per run.

Every per-source tag (`Loss/train_by_source/<name>`, `Mixture/<name>`,
`tokens/supervised_by_source/<name>`, `data/source/<name>/...`) carries the source's short
name (`packlm.config.sources.source_tag_names`); this table, in TensorBoard's Text tab, maps
each name to its `data.sources` / `data.val_sources` entry: the path, and its weight or share.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

from packlm.callbacks.views.tensorboard import tensorboard_logger
from packlm.config.sources import source_path, source_share, source_tag_names, source_weight

TAG = "data/sources"


def source_table(data: Any) -> str:
    """Markdown: a row per source of each split (name, split, path, share or weight)."""
    lines = ["| name | split | path | share / weight |", "| --- | --- | --- | --- |"]
    splits = [("train", data.sources)]
    if getattr(data, "val_sources", None):
        splits.append(("val", data.val_sources))
    for split, entries in splits:
        for name, entry in zip(source_tag_names(entries), entries, strict=True):
            share = source_share(entry)
            amount = f"share {share:g}" if share is not None else f"weight {source_weight(entry):g}"
            path = source_path(entry).replace("|", "\\|")
            lines.append(f"| `{name}` | {split} | `{path}` | {amount} |")
    if not getattr(data, "val_sources", None):
        lines.append("\nvalidation: data.val_fraction of the training sources' documents")
    return "\n".join(lines)


class SourceTable(L.Callback):
    """Write `source_table` of the datamodule's config when training starts (rank 0)."""

    @rank_zero_only
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        data = getattr(getattr(trainer, "datamodule", None), "data", None)
        logger = tensorboard_logger(trainer)
        if data is None or logger is None or not getattr(data, "sources", None):
            return
        logger.experiment.add_text(TAG, source_table(data), trainer.global_step)
