"""Samples -> the batch of DESIGN.md: input_ids, labels, segment_ids, position_ids.

Everything is derived from two arrays per batch, the T+1 tokens each row read and the
document index of each token inside its row, so the rules live in one place:
a label is the next token when that token is real and in the same segment; a position
restarts at 0 wherever the segment changes (row start included).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

IGNORE_INDEX = -100


@dataclass
class Samples:
    """What a worker reads for one batch; rows past the real samples are all PAD."""

    tokens: np.ndarray  # int64 [B, T+1]: the tokens read, PAD where none
    segments: np.ndarray  # int32 [B, T+1]: document index inside the row, -1 where PAD


def collate(samples: Samples, packing: str) -> dict[str, torch.Tensor]:
    """The batch dict; in `stream` mode a row is one segment (targets cross documents)."""
    return to_tensors(collate_arrays(samples, packing))


def collate_arrays(samples: Samples, packing: str) -> dict[str, np.ndarray]:
    """`collate` as numpy arrays: what DataLoader workers send back, because numpy arrays
    pickle through the pipe about 8x faster than tensors through shared memory."""
    seg = samples.segments
    if packing == "stream":
        seg = np.where(seg >= 0, 0, -1).astype(np.int32)
    tokens = samples.tokens
    seg_in, seg_next = seg[:, :-1], seg[:, 1:]  # [B, T]
    labels = np.where((seg_next == seg_in) & (seg_next >= 0), tokens[:, 1:], IGNORE_INDEX)
    return {
        "input_ids": np.ascontiguousarray(tokens[:, :-1]),
        "labels": labels.astype(np.int64),
        "segment_ids": np.ascontiguousarray(seg_in, dtype=np.int32),
        "position_ids": positions(seg_in),
    }


def to_tensors(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Zero-copy numpy -> torch."""
    return {k: torch.from_numpy(v) for k, v in batch.items()}


def positions(segments: np.ndarray) -> np.ndarray:
    """int64 [B, T]: 0 where a segment starts (and at the row start), +1 per token; 0 on PAD."""
    _, t = segments.shape
    col = np.arange(t)
    starts = np.ones(segments.shape, dtype=bool)
    starts[:, 1:] = segments[:, 1:] != segments[:, :-1]
    run_start = np.maximum.accumulate(np.where(starts, col, 0), axis=1)  # [B, T]
    return np.where(segments >= 0, col - run_start, 0).astype(np.int64)


def mark_stream(batch: Any) -> Any:
    """Mark a batch whose segment ids are all 0 (stream rows) with `stream=True` while it is
    still on the CPU, so the model takes the is_causal path without a device read."""
    seg = batch.get("segment_ids") if isinstance(batch, Mapping) else None
    if seg is not None and seg.device.type == "cpu":
        batch = {**batch, "stream": not bool(seg.any())}
    return batch
