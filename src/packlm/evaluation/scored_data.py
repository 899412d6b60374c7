"""What `python -m packlm.evaluate` scores: the files given in data.val_sources, or else the
run's own validation split as the checkpoint records it.

- data.val_sources given: those files are the only source (all of one split, val_fraction
  0), read with the checkpoint's reader options (FROM_CHECKPOINT) unless overridden.
- none given: the checkpoint's whole data config, so the split is the run's: its
  data.val_sources, or the data.val_fraction of its data.sources by content hash, exact
  duplicates of training documents dropped (the same stores, cached under the same
  fingerprint). Only when those sources are gone does the error ask for data.val_sources,
  naming the missing path.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from packlm.config.data import DataConfig
from packlm.errors import ConfigError

FROM_CHECKPOINT = (
    "window", "packing", "bos", "text_field", "separator", "encoding_errors", "normalize_newlines",
    "chat_supervised", "chat_overflow", "pack_size",
)  # fmt: skip
"""The checkpoint's keys kept when other files are scored: the model's window and packing,
the tokens' BOS, how a file becomes documents, which conversation targets trained and what
became of a conversation longer than a sample (cut between turns or dropped, by the window
and pack size)."""


@dataclass(frozen=True)
class ScoredData:
    """The data config to prepare, which of its splits is scored, and one line saying so."""

    data: DataConfig
    split: str  # "train" (the given files: val_fraction 0) or "val" (the run's split)
    says: str

    @property
    def own_split(self) -> bool:
        return self.split == "val"


def scored_data(saved: dict[str, Any], overrides: dict[str, Any]) -> ScoredData:
    """The checkpoint's data config (`saved`), the non-null `overrides` on top (the data.*
    keys the user typed), read in this process; validation windows (stride = window)."""
    sources = overrides.get("val_sources")
    if isinstance(sources, str):  # data.val_sources=a.txt, without brackets
        sources = [sources]
    known = {f.name for f in fields(DataConfig)}
    given = {k: v for k, v in overrides.items() if v is not None and k in known}
    if sources:
        values = {k: v for k, v in saved.items() if k in known and k in FROM_CHECKPOINT}
        values.update(given)
        values.update(sources=list(sources), val_sources=None, val_fraction=0.0)
        says = f"scoring data.val_sources={list(sources)} (given)"
        return ScoredData(_config(values), "train", says)
    if not saved.get("sources"):
        raise ConfigError(
            "data.val_sources: the checkpoint records no data sources of its run; give the "
            "files to score (data.val_sources=[a.txt])"
        )
    values = {k: v for k, v in saved.items() if k in known}
    values.update({k: v for k, v in given.items() if k != "val_sources"})
    values.update(curriculum=None, skip_documents=[], skip_steps=[], shard=saved.get("shard"))
    if saved.get("val_sources"):
        which = f"data.val_sources={list(saved['val_sources'])}"
    elif float(saved.get("val_fraction") or 0) > 0:
        which = (
            f"data.val_fraction={saved['val_fraction']} of data.sources="
            f"{list(saved['sources'])} (by content hash)"
        )
    else:
        raise ConfigError(
            "data.val_sources: the run had no validation split (data.val_fraction=0, no "
            "data.val_sources); give the files to score (data.val_sources=[a.txt])"
        )
    says = f"scoring the run's validation split as the checkpoint records it: {which}"
    return ScoredData(_config(values), "val", says)


def _config(values: dict[str, Any]) -> DataConfig:
    values = dict(values, num_workers=0)
    values["stride"] = values.get("window", DataConfig().window)  # validation windows anyway
    return DataConfig.from_mapping(values)


def missing_sources(error: ValueError, scored: ScoredData) -> ValueError:
    """A source error of preparing `scored`, as the user should read it: the key they typed
    (data.val_sources), or for the run's own split that it is gone and what to give instead."""
    message = str(error)
    if scored.own_split:
        return ConfigError(
            f"data.val_sources: the run's validation split cannot be read again ({message}); "
            "give the files to score (data.val_sources=[a.txt])"
        )
    message = message.replace("data.sources", "data.val_sources", 1)
    message = message.replace("no training documents", "no documents to score")
    return type(error)(message)
