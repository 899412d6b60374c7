"""The `data` config group as a dataclass: every key, its default, and its validation.

Validation runs before any work starts and names the offending key, so a bad override
fails in milliseconds instead of after the store was built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from packlm.errors import ConfigError

__all__ = ["ConfigError", "DataConfig"]

PACKING_MODES = ("none", "document", "stream")
TAIL_POLICIES = ("drop", "cover", "pad")
ENCODING_ERRORS = ("strict", "replace", "skip")


@dataclass
class DataConfig:
    # --- sources -> documents (packlm.data.store.sources) ---
    sources: list[Any] = field(default_factory=lambda: ["default"])
    """Entries: "default" (the embedded stdlib corpus), a path or glob of text files, a .jsonl
    file, or a mapping {path: ..., weight: ...} to mix sources by weight."""
    val_sources: list[Any] | None = None
    """Explicit validation sources; when unset, `val_fraction` of documents by content hash."""
    val_fraction: float = 0.05
    """Fraction of documents sent to validation by a stable hash of their content."""
    text_field: str = "text"
    """The field holding the text in .jsonl records."""
    separator: str | None = None
    """Split each text file into documents on this string (e.g. "\\n\\n"); None: one file, one document."""
    encoding_errors: str = "strict"
    """Non-UTF-8 input: strict (error with path and byte offset), replace (U+FFFD), skip (drop the document)."""

    # --- store -> epoch plan -> samples (packlm.data.epoch.plan) ---
    window: int = 256
    """T: input positions per sample; a sample reads T+1 tokens."""
    stride: int = 256
    """Distance between consecutive window starts in one sequence."""
    random_offset: bool = True
    """Draw each sequence's first window start uniformly in [0, stride) every epoch."""
    tail: str = "pad"
    """End of a sequence no full window reaches: drop, cover (one window aligned to the end), pad."""
    packing: str = "document"
    """none (one document per sequence), document (packs, block-diagonal mask), stream (plain causal)."""
    pack_size: int | None = None
    """Tokens per pack; None: unlimited (the split in epoch order is one sequence)."""
    shuffle: bool = True
    """Reshuffle the samples every epoch."""
    shuffle_documents: bool = True
    """Reshuffle the document order before packing every epoch."""
    batch_size: int = 16
    """Samples per batch per rank."""
    num_workers: int = 1
    """DataLoader worker processes per rank."""
    seed: int = 1337
    """Seed of the epoch plan (offsets, orders); the plan of epoch e is a function of (seed, e)."""

    def validate(self, model_context: int | None = None) -> DataConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        if not isinstance(self.sources, (list, tuple)) or len(self.sources) == 0:
            raise ConfigError("data.sources: give at least one source (e.g. [default])")
        for i, entry in enumerate(self.sources):
            _check_source_entry(f"data.sources[{i}]", entry)
        if self.val_sources is not None:
            for i, entry in enumerate(self.val_sources):
                _check_source_entry(f"data.val_sources[{i}]", entry)
        if not 0.0 <= self.val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction={self.val_fraction}: must be in [0, 1)")
        if self.encoding_errors not in ENCODING_ERRORS:
            raise ConfigError(
                f"data.encoding_errors={self.encoding_errors!r}: allowed {list(ENCODING_ERRORS)}"
            )
        if self.separator is not None and self.separator == "":
            raise ConfigError("data.separator: must be a non-empty string or null")
        _positive("data.window", self.window)
        _positive("data.stride", self.stride)
        _positive("data.batch_size", self.batch_size)
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ConfigError(f"data.num_workers={self.num_workers}: must be an integer >= 0")
        if self.packing not in PACKING_MODES:
            raise ConfigError(f"data.packing={self.packing!r}: allowed {list(PACKING_MODES)}")
        if self.tail not in TAIL_POLICIES:
            raise ConfigError(f"data.tail={self.tail!r}: allowed {list(TAIL_POLICIES)}")
        if self.pack_size is not None and self.pack_size < self.window + 1:
            raise ConfigError(
                f"data.pack_size={self.pack_size}: must be at least data.window + 1 = {self.window + 1}"
            )
        if model_context is not None and self.window > model_context:
            raise ConfigError(
                f"data.window={self.window}: longer than the model's context "
                f"(model.context_length={model_context})"
            )
        return self


def expand_escapes(text: str) -> str:
    r"""Turn the escapes \n, \t, \r and \\ into the characters they name."""
    return re.sub(
        r"\\([ntr\\])", lambda m: {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}[m[1]], text
    )


def source_weight(entry: Any) -> float:
    """The mixing weight of a source entry (1.0 unless given as {path, weight})."""
    if isinstance(entry, dict) or hasattr(entry, "get"):
        return float(entry.get("weight", 1.0))
    return 1.0


def source_path(entry: Any) -> str:
    """The path, glob or "default" of a source entry."""
    if isinstance(entry, str):
        return entry
    return str(entry.get("path"))


def _check_source_entry(key: str, entry: Any) -> None:
    if isinstance(entry, str):
        if not entry:
            raise ConfigError(f"{key}: empty path")
        return
    if hasattr(entry, "get") and hasattr(entry, "keys"):
        unknown = set(entry.keys()) - {"path", "weight"}
        if unknown:
            raise ConfigError(f"{key}: unknown keys {sorted(unknown)}; allowed ['path', 'weight']")
        if not entry.get("path"):
            raise ConfigError(f"{key}.path: missing")
        weight = entry.get("weight", 1.0)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
            raise ConfigError(f"{key}.weight={weight!r}: must be a positive number")
        return
    raise ConfigError(f"{key}={entry!r}: expected a path string or {{path: ..., weight: ...}}")


def _positive(key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{key}={value!r}: must be a positive integer")
