"""The lr schedule: linear warmup, then a cosine down to min_lr_ratio (or optim.schedule=wsd:
flat, then a linear warmdown to it), and its clocks.

The clock is optimizer steps, or under data.curriculum the supervised tokens trained; with
optim.anneal_by_time also the share of trainer.max_time spent after warmup (Lightning's
Timer), whichever is further along. LitCausalLM.configure_optimizers puts them together.
"""

from __future__ import annotations

import math

import lightning as L
from lightning.pytorch.callbacks import Timer


def time_limit(trainer: L.Trainer) -> Timer | None:
    """Lightning's Timer of trainer.max_time, or None without a time limit."""
    timers = [c for c in trainer.callbacks if isinstance(c, Timer)]
    return timers[0] if timers and timers[0].time_remaining() is not None else None


def lr_factor(
    step: float,
    warmup: float,
    total: float,
    min_ratio: float,
    first=1,
    on_time: float = 0.0,
    shape: str = "cosine",
    warmdown: float = 0.2,
) -> float:
    """Multiplier of the peak lr at optimizer step `step` (0-based): linear warmup, then a
    cosine from 1 down to min_ratio at step `total`, flat after. Under a curriculum all are
    supervised tokens and `first` the tokens of one step: the same schedule, tokens as clock.
    on_time: the time limit's share spent after warmup; the cosine follows whichever of the
    two is further along (total=inf: the time alone). shape="wsd": 1 until the last
    `warmdown` share of the progress, then linear down to min_ratio."""
    if step < warmup:
        return min(1.0, (step + first) / warmup)
    progress = (step - warmup) / max(1, total - warmup) if total != math.inf else 0.0
    progress = min(1.0, max(progress, on_time))
    if shape == "wsd":
        decayed = max(0.0, progress - (1.0 - warmdown)) / warmdown  # 0 .. 1 in the warmdown
        # exactly 1 at the end: a tiny warmdown_ratio rounds 1 - warmdown to 1 (the lr stayed at
        # its peak), and 1 - (1 - min_ratio) * (a rounding above 1) gave 0 a negative lr
        left = 0.0 if progress >= 1.0 else 1.0 - min(1.0, decayed)
        return min_ratio + (1.0 - min_ratio) * left  # min_ratio .. 1, both exact
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
