"""Rows of each global batch per source under a mixture: a pure function of (schedule, step).

The target: source s should have `T_s(u) = B * sum_{v<u} share_s(v)` of the first u global
batches' u*B rows (B rows a global batch; `share_s(v)` the schedule at global batch v: a
point's shares, or linear between points; a schedule's optimizer step k is global batch
k * trainer.accumulate_grad_batches). Shares are rounded to integer parts of Q = 2^20 per step
(largest remainder, so the parts of every step sum to Q exactly), and T_s counts those.

The rule: the k-th row of source s (k = 1, 2, ...) is *due* at the moment T_s reaches k,
with T_s rising linearly inside each step. All rows of all sources, ordered by that moment
(ties by source index), form one fixed sequence, and the first u*B rows of it are the first
u global batches: `rows_before(u)[s]` = R_s(u). Because one order is cut at u*B, R_s(u)
never decreases and the rows of a step always sum to B, for any schedule; and it is closed
form in u: every row due by u*B is in (floor(T_s(u)) of each source), plus the L < n rows
due soonest after it, which lie within the next ceil((n-1)/B) steps.

Guarantee (n sources, tested in tests/data/epoch/test_mixture_allocation.py): at every
global batch boundary u and for every source, `floor(T_s(u)) <= R_s(u) < T_s(u) + n - 1`,
so a source is never a whole row behind its target, and ahead by less than 1 row with two
sources (by less than n-1 only while smaller sources' rows are about to come due). Over any
k consecutive global batches a source's rows differ from its target for them by less than
n rows (less than 2 with two sources). These are rows; its supervised tokens are its rows
times the targets its own samples hold (a source of short documents with data.packing=none
gives fewer tokens per row), which `python -m packlm.stats` reports per source and phase.
"""

from __future__ import annotations

from math import ceil
from typing import Any

import numpy as np

from packlm.config.mixture import mixture_points

Q = 1 << 20
"""Integer parts of one step's rows that the shares are rounded to."""


def quantize(shares: np.ndarray) -> np.ndarray:
    """int64 [..., n]: shares (summing to 1 along the last axis) as parts of Q summing to Q
    exactly: floors, then one more part to the largest remainders (ties: lower index)."""
    exact = np.asarray(shares, dtype=np.float64) * Q
    parts = np.floor(exact).astype(np.int64)
    left = Q - parts.sum(axis=-1, keepdims=True)  # [..., 1] parts still to give
    order = np.argsort(-(exact - parts), axis=-1, kind="stable")  # largest remainder first
    rank = np.argsort(order, axis=-1, kind="stable")
    return parts + (rank < left)


class Allocation:
    """R_s(u), the rows of source s in the first u global batches (see the module doc).

    `steps` [P] ascending from 0 and `shares` [P, n] (each row summing to 1): the schedule's
    points; `linear`: shares move linearly between points, else hold; `rows`: B, the rows of
    one global batch (all ranks)."""

    def __init__(self, steps: list[int], shares: np.ndarray, linear: bool, rows: int):
        self.steps = np.asarray(steps, dtype=np.int64)
        self.shares = np.asarray(shares, dtype=np.float64)
        self.linear = linear and len(steps) > 1
        self.rows = int(rows)
        self.n = self.shares.shape[1]
        self.lookahead = max(1, ceil((self.n - 1) / self.rows))
        self._points = quantize(self.shares)  # [P, n]
        self._ramps: dict[int, np.ndarray] = {}  # point i -> int64 [len+1, n] prefix parts
        # int64 [P, n]: W at each point (W = Q * T, an integer)
        spans = [self._span_parts(i) for i in range(len(self.steps) - 1)]
        self._w_at = np.zeros((len(self.steps), self.n), dtype=np.int64)
        if spans:
            self._w_at[1:] = self.rows * np.cumsum(spans, axis=0)

    @classmethod
    def of(cls, cfg: Any, rows: int, accumulate: int = 1) -> Allocation:
        """The allocation of a DataConfig's mixture for global batches of `rows` rows, with
        `accumulate` global batches an optimizer step (the schedule's steps are optimizer steps)."""
        points = mixture_points(cfg)
        shares = np.asarray([list(shares.values()) for _, shares in points])  # [P, n]
        linear = cfg.mixture_interpolation == "linear"
        return cls([step * accumulate for step, _ in points], shares, linear, rows)

    def parts(self, u: np.ndarray) -> np.ndarray:
        """int64 [len(u), n]: each step's shares in parts of Q."""
        u = np.asarray(u, dtype=np.int64)
        i = np.searchsorted(self.steps, u, side="right") - 1  # [m] the point in force
        if not self.linear:
            return self._points[i]
        last = i >= len(self.steps) - 1
        j = np.minimum(i + 1, len(self.steps) - 1)
        frac = np.where(
            last, 0.0, (u - self.steps[i]) / np.maximum(self.steps[j] - self.steps[i], 1)
        )
        exact = self.shares[i] + (self.shares[j] - self.shares[i]) * frac[:, None]
        return np.where(last[:, None], self._points[i], quantize(exact))

    def _span_parts(self, i: int) -> np.ndarray:
        """int64 [n]: the parts of the steps from point i to point i+1."""
        if not self.linear:
            return self._points[i] * (self.steps[i + 1] - self.steps[i])
        return self._ramp(i)[-1]

    def _ramp(self, i: int) -> np.ndarray:
        """int64 [len+1, n]: the parts of the ramp's steps before each of its steps (cached)."""
        if i not in self._ramps:
            parts = self.parts(np.arange(self.steps[i], self.steps[i + 1]))
            self._ramps[i] = np.concatenate([np.zeros((1, self.n), np.int64), np.cumsum(parts, 0)])
        return self._ramps[i]

    def w(self, u: np.ndarray) -> np.ndarray:
        """int64 [len(u), n]: Q * T_s(u), the targets of the first u global batches in parts."""
        u = np.asarray(u, dtype=np.int64)
        i = np.searchsorted(self.steps, u, side="right") - 1
        into = u - self.steps[i]  # [m] steps since the point
        out = self._w_at[i] + self.rows * self._points[i] * into[:, None]
        if self.linear:
            ramp = i < len(self.steps) - 1
            for p in np.unique(i[ramp]):  # ramps: their prefix sums
                at = ramp & (i == p)
                out[at] = self._w_at[p] + self.rows * self._ramp(int(p))[into[at]]
        return out

    def rows_before(self, u: np.ndarray) -> np.ndarray:
        """int64 [len(u), n]: R_s(u), the rows of each source in global batches 0 .. u-1."""
        u = np.asarray(u, dtype=np.int64)
        ahead = u[:, None] + np.arange(self.lookahead + 1)  # [m, K+1] steps u .. u+K
        w = self.w(ahead.ravel()).reshape(len(u), self.lookahead + 1, self.n)  # [m, K+1, n]
        due = w[:, 0] // Q  # [m, n] rows due by the boundary
        left = self.rows * u - due.sum(axis=1)  # [m] the L rows due soonest after it
        if self.n == 1 or not left.any():
            return due
        parts = self.parts(ahead[:, :-1].ravel()).reshape(len(u), self.lookahead, self.n)
        j = np.arange(1, self.n)  # candidates: each source's next n-1 rows
        k = due[:, :, None] + j  # [m, n, n-1]
        target = k * Q
        # the step (0 .. K-1 after u) in which each candidate comes due; K: not within them
        within = (w[:, 1:, :, None] >= target[:, None]).argmax(axis=1)  # [m, n, n-1]
        reached = w[:, -1, :, None] >= target
        step = np.where(reached, within, self.lookahead)
        m_idx = np.arange(len(u))[:, None, None]
        s_idx = np.arange(self.n)[None, :, None]
        s_clip = np.minimum(step, self.lookahead - 1)
        w_at = w[m_idx, s_clip, s_idx]  # [m, n, n-1] W at the start of that step
        p_at = np.maximum(parts[m_idx, s_clip, s_idx], 1)
        offset = (target - w_at) / p_at  # rows into that step, in (0, B]
        key = step * (2.0 * self.rows + 2) + np.where(reached, offset, 0.0)
        key = key.reshape(len(u), -1)  # [m, n*(n-1)], source-major: stable ties by source
        order = np.argsort(key, axis=1, kind="stable")
        taken = np.argsort(order, axis=1, kind="stable") < left[:, None]  # [m, n*(n-1)]
        return due + taken.reshape(len(u), self.n, self.n - 1).sum(axis=2)

    def rows_of(self, u: np.ndarray) -> np.ndarray:
        """int64 [len(u), n]: the rows of each source in global batch u (summing to B)."""
        u = np.asarray(u, dtype=np.int64)
        both = self.rows_before(np.concatenate([u, u + 1]))
        return both[len(u) :] - both[: len(u)]

    def target(self, u: np.ndarray) -> np.ndarray:
        """float64 [len(u), n]: T_s(u), the (rounded shares') target rows of batches < u."""
        return self.w(u) / Q
