"""An epoch's plan statistics to the Trainer's loggers: a few lines over epochs, histograms;
and the warning when Lightning would cut an epoch.

The full table is `packlm.callbacks.EpochStatistics`; these are the numbers worth a curve
(`data/...`, per source `data/source/<name>/...`, <name> the source's one name in every tag:
`packlm.config.sources.source_tag_names`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning as L

from packlm.config.sources import split_source_names

log = logging.getLogger(__name__)

EPOCH_LINES = ("epoch", "samples", "supervised_tokens", "fill_ratio", "supervised_ratio")
EPOCH_LINES += ("target_multiplicity_mean", "never_target_fraction", "overlap_ratio")
SOURCE_LINES = ("samples", "supervised_tokens")  # statistics as lines over epochs, per source


def log_plan_statistics(trainer: L.Trainer, stats: dict[str, Any]) -> None:
    """Write one epoch's statistics at the current global step."""
    step = trainer.global_step
    scalars = {f"data/{k}": float(stats[k]) for k in EPOCH_LINES}
    sources = stats.get("sources", {})
    data = getattr(getattr(trainer, "datamodule", None), "data", None)
    names = split_source_names(data, "train", list(sources))
    for name, counts in zip(names, sources.values(), strict=True):
        tag = f"data/source/{name}"
        scalars.update({f"{tag}/{k}": float(counts[k]) for k in SOURCE_LINES})
    for logger in trainer.loggers:
        logger.log_metrics(scalars, step=step)
        writer = getattr(logger, "experiment", None)
        if hasattr(writer, "add_histogram_raw"):
            for name, h in stats["histograms"].items():
                if h.num:
                    writer.add_histogram_raw(
                        f"data/{name}", h.min, h.max, h.num, h.sum, h.sum_squares,
                        h.edges[1:].tolist(), h.counts.tolist(), global_step=step,
                    )  # fmt: skip


def check_epoch_length(trainer: L.Trainer, sampler: Any, epoch: int) -> None:
    """Warn when Lightning will cut an epoch: it read the length of an earlier one."""
    limit, reload = trainer.num_training_batches, trainer.reload_dataloaders_every_n_epochs
    if sampler is None or not math.isfinite(limit) or reload == 1 or len(sampler) <= limit:
        return
    log.warning(
        "epoch %d has %d batches but Lightning will stop it after %d (the length it read at "
        "the first epoch); create the Trainer with reload_dataloaders_every_n_epochs=1",
        epoch, len(sampler), limit,
    )  # fmt: skip
