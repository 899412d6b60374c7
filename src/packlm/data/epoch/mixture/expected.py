"""What a mixture is expected to train, before training: supervised tokens per source per
schedule phase (`python -m packlm.stats`) and the token budget's horizon in global batches.

A source's rows are exact (`Allocation`); its supervised tokens per row are the mean of its
pass 0 (`plan_statistics`: supervised targets / samples), so the tokens are an expectation:
a later pass's offsets and packs differ slightly. What it costs follows the data, never the
steps a schedule or a budget names: rows come from `Allocation.expected_target` (closed form
for a long linear schedule) and passes from pass 0's size, with no later pass built.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packlm.data.epoch.mixture.streams import SourceStreams
from packlm.data.epoch.statistics import plan_statistics

HORIZON = 1 << 40
"""Global batches past which a token budget is called unreachable."""


def per_row_tokens(streams: SourceStreams, doc_sources: np.ndarray) -> np.ndarray:
    """float64 [n]: each source's mean supervised targets per sample (row), from its pass 0."""
    out = []
    for s in range(len(streams.names)):
        stats = plan_statistics(streams.plan(s, 0), doc_sources, streams.names)
        out.append(stats["supervised_tokens"] / max(stats["samples"], 1))
    return np.asarray(out)


class MixtureRates:
    """Expected supervised tokens (all ranks) after a number of global batches, and back."""

    def __init__(self, streams: SourceStreams, per_row: np.ndarray):
        self.allocation = streams.allocation
        self.per_row = per_row

    def tokens(self, batches: float) -> float:
        """Expected supervised targets of the first `batches` global batches."""
        lo = int(np.floor(batches))
        at = self.allocation.expected_target(np.asarray([lo, lo + 1])) @ self.per_row  # [2]
        return float(at[0] + (batches - lo) * (at[1] - at[0]))

    def batches(self, tokens: float) -> float:
        """The global batches expected to train `tokens` targets (the inverse of `tokens`)."""
        lo, hi = 0, 1
        while self.tokens(hi) < tokens and hi < HORIZON:
            lo, hi = hi, hi * 2
        while hi - lo > 1:  # tokens(lo) < tokens <= tokens(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.tokens(mid) < tokens else (lo, mid)
        below, above = self.tokens(lo), self.tokens(hi)
        return lo + (tokens - below) / max(above - below, 1e-12)


def phase_table(streams: SourceStreams, per_row: np.ndarray, accumulate: int = 1) -> dict[str, Any]:
    """The mixture as `python -m packlm.stats` prints it: per source its pass-0 samples and
    targets per row; per schedule phase (from one point to the next; the last: per step) its
    shares, rows, expected supervised tokens and the passes of each source expected by its
    end (its rows / its pass 0's samples). Rows are exact ("rows", "rows_per_step") unless a
    linear schedule runs past `EXACT_RAMPS` global batches: then "expected_rows" (floats,
    within B * steps / 2^20 rows of them), so no far point costs a ramp's steps."""
    allocation, names = streams.allocation, streams.names
    exact = allocation.exact_expectations
    count = allocation.rows_before if exact else allocation.expected_target
    samples = np.asarray([streams.pass_samples(s, 0) for s in range(len(names))])  # [n]
    steps = allocation.steps.tolist()
    phases = []
    for i, first in enumerate(steps):
        last = steps[i + 1] if i + 1 < len(steps) else None
        span = [first, last if last is not None else first + accumulate]
        at = count(np.asarray(span))  # [2, n]
        rows = at[1] - at[0]  # [n]
        listed = rows.tolist() if exact else rows.round(1).tolist()
        key = "rows" if exact else "expected_rows"
        phase = {
            "from_step": first // accumulate,
            "to_step": None if last is None else last // accumulate,
            "shares": dict(zip(names, allocation.shares[i].round(6).tolist(), strict=True)),
        }
        if last is None:  # open-ended: one optimizer step of it
            phase[f"{key}_per_step"] = dict(zip(names, listed, strict=True))
            phase["supervised_tokens_per_step"] = _named(names, rows * per_row)
        else:
            phase[key] = dict(zip(names, listed, strict=True))
            phase["supervised_tokens"] = _named(names, rows * per_row)
            passes = at[1] / np.maximum(samples, 1)  # [n] by the phase's end
            phase["expected_passes"] = {
                n: round(float(v), 2) for n, v in zip(names, passes, strict=True)
            }
        phases.append(phase)
    return {
        "rows_per_global_batch": allocation.rows,
        "epoch_global_batches": streams.epoch_batches(),
        "sources": {
            n: {"pass_samples": int(samples[s]), "supervised_per_row": float(r)}
            for s, (n, r) in enumerate(zip(names, per_row, strict=True))
        },
        "phases": phases,
    }


def _named(names: list[str], values: np.ndarray) -> dict[str, float]:
    return {n: round(float(v), 1) for n, v in zip(names, values, strict=True)}
