"""Samples -> the batch of `packlm.batch` (input_ids, labels, segment_ids, position_ids).

The rules (labels, positions, varlen runs) live in `packlm.batch`, written once; this
module is the loader's side: what a worker reads, numpy to torch, the stream mark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from packlm.batch import IGNORE_INDEX, make_batch, positions

__all__ = ["IGNORE_INDEX", "Samples", "collate", "collate_arrays", "positions", "to_tensors"]


@dataclass
class Samples:
    """What a worker reads for one batch; rows past the real samples are all PAD."""

    tokens: np.ndarray  # int64 [B, T+1]: the tokens read, PAD where none
    segments: np.ndarray  # int32 [B, T+1]: document index inside the row, -1 where PAD
    sources: np.ndarray | None = None  # int16 [B, T+1]: the document's store source, -1 on PAD
    skipped: np.ndarray | None = None  # bool [B, T+1]: a data.skip_documents token; None: none
    documents: np.ndarray | None = None  # int32 [B, T+1]: the store document, -1 on PAD (val)
    supervised: np.ndarray | None = None  # bool [B, T+1]: may it be a target (chat); None: all


def collate(samples: Samples, packing: str, varlen: bool = False) -> dict[str, torch.Tensor]:
    """The batch dict; in `stream` mode a row is one segment (targets cross documents)."""
    return to_tensors(collate_arrays(samples, packing, varlen))


def collate_arrays(samples: Samples, packing: str, varlen: bool = False) -> dict[str, np.ndarray]:
    """`collate` as numpy arrays: what DataLoader workers send back, because numpy arrays
    pickle through the pipe about 8x faster than tensors through shared memory."""
    return make_batch(
        samples.tokens,
        samples.segments,
        packing,
        varlen,
        samples.sources,
        samples.skipped,
        samples.documents,
        samples.supervised,
    )


def to_tensors(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Zero-copy numpy -> torch."""
    return {k: torch.from_numpy(v) for k, v in batch.items()}


def mark_stream(batch: Any) -> Any:
    """Mark a batch whose segment ids are all 0 (stream rows) with `stream=True` while it is
    still on the CPU, so the model takes the is_causal path without a device read."""
    seg = batch.get("segment_ids") if isinstance(batch, Mapping) else None
    if seg is not None and seg.device.type == "cpu":
        batch = {**batch, "stream": not bool(seg.any())}
    return batch
