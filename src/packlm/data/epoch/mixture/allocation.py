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

Cost: R_s(u) costs what the global batches up to u cost, never the schedule's far points: a
constant phase is closed form; a ramp's parts are summed in blocks of BLOCK steps when a
batch in or past them is first asked for (`RampSums`: n int64 kept per block). W is exact
in int64 up to `horizon(B, n)` global batches (2^31 at B = 4096); a schedule point past it
is refused naming its key, and a batch past it is refused when asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from math import ceil
from typing import Any

import numpy as np

from packlm.config.mixture import mixture_points
from packlm.errors import ConfigError

Q = 1 << 20
"""Integer parts of one step's rows that the shares are rounded to."""
BLOCK = 1 << 12
"""Steps of a ramp whose parts are summed together, when a step in them is first asked for."""
MAX_SUM = 1 << 28
"""The most ramp steps one look-up sums at once (~0.3 us each: about a minute; a resume at
global batch 10^8 sums 10^8): a batch further into a ramp than that is refused in one line."""
EXACT_RAMPS = 1 << 20
"""Expectations (`expected_target`) count the ramps of a linear schedule exactly while its
last point is within this many global batches (at most ~1 s), else in closed form."""


def horizon(rows: int, n: int) -> int:
    """The last global batch an allocation of `rows` rows and `n` sources deals: W = Q * T of
    the batches up to it and its look-ahead must fit in int64."""
    return (2**63 - 1) // (rows * Q) - max(1, ceil((n - 1) / rows)) - 1


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
    one global batch (all ranks).

    What it costs follows the global batches asked for, never the schedule's far points: a
    constant phase is closed form; a ramp's parts are summed block by block (`RampSums`) up
    to the batch asked; W at a point is found when a batch at or past it is first asked for.
    `horizon`: the last global batch whose W fits in int64 (B * Q * u < 2^63)."""

    def __init__(self, steps: list[int], shares: np.ndarray, linear: bool, rows: int):
        self.rows = int(rows)
        self.shares = np.asarray(shares, dtype=np.float64)
        self.n = self.shares.shape[1]
        self.lookahead = max(1, ceil((self.n - 1) / self.rows))
        self.horizon = horizon(self.rows, self.n)
        if steps[-1] > self.horizon:
            raise ValueError(f"a schedule point at global batch {steps[-1]} is past {self.horizon}")
        self.steps = np.asarray(steps, dtype=np.int64)
        self.linear = linear and len(steps) > 1
        self._points = quantize(self.shares)  # [P, n]
        self._ramps: dict[int, RampSums] = {}  # point i -> the parts of its ramp, by blocks
        self._w_at = [np.zeros(self.n, dtype=np.int64)]  # W at points 0, 1, ... found so far

    @classmethod
    def of(cls, cfg: Any, rows: int, accumulate: int = 1) -> Allocation:
        """The allocation of a DataConfig's mixture for global batches of `rows` rows, with
        `accumulate` global batches an optimizer step (the schedule's steps are optimizer steps).
        ConfigError naming the point whose step is past what int64 counts at this batch."""
        points = mixture_points(cfg)
        last = horizon(rows, len(points[0][1])) // accumulate
        for i, (step, _) in enumerate(points):
            if step > last:
                raise ConfigError(
                    f"data.mixture_schedule[{i}].step={step}: past the last step a mixture of "
                    f"{rows} rows a global batch can count ({last:,}: B * 2^20 * global "
                    "batches must fit in int64); give a nearer step"
                )
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

    def _ramp(self, i: int) -> RampSums:
        if i not in self._ramps:
            first, end = int(self.steps[i]), int(self.steps[i + 1])
            self._ramps[i] = RampSums(self.parts, first, end, self.n)
        return self._ramps[i]

    def _w_point(self, p: int) -> np.ndarray:
        """int64 [n]: W at point p, summing the spans before it that are not summed yet."""
        while len(self._w_at) <= p:
            i = len(self._w_at) - 1  # the span from point i to point i+1
            if self.linear:
                span = self._ramp(i).before(np.asarray([self.steps[i + 1] - self.steps[i]]))[0]
            else:
                span = self._points[i] * (self.steps[i + 1] - self.steps[i])
            self._w_at.append(self._w_at[i] + self.rows * span)
        return self._w_at[p]

    def _check(self, u: np.ndarray, last: int) -> None:
        """ConfigError for a global batch past `last` (or below 0): W would leave int64."""
        if len(u) and (u.min() < 0 or u.max() > last):
            bad = int(u.min()) if u.min() < 0 else int(u.max())
            raise ConfigError(
                f"global batch {bad}: a mixture of {self.rows} rows a global batch counts global "
                f"batches 0 .. {self.horizon:,} (B * 2^20 * global batches must fit in int64)"
            )

    def w(self, u: np.ndarray) -> np.ndarray:
        """int64 [len(u), n]: Q * T_s(u), the targets of the first u global batches in parts."""
        u = np.asarray(u, dtype=np.int64)
        self._check(u, self.horizon + self.lookahead + 1)  # rows_before's look-ahead too
        i = np.searchsorted(self.steps, u, side="right") - 1
        into = u - self.steps[i]  # [m] steps since the point
        out = np.empty((len(u), self.n), dtype=np.int64)
        for p in np.unique(i):  # each point in force: its W, plus the steps since
            at = i == p
            if self.linear and p < len(self.steps) - 1:  # a ramp: its prefix sums
                out[at] = self._w_point(int(p)) + self.rows * self._ramp(int(p)).before(into[at])
            else:
                out[at] = self._w_point(int(p)) + self.rows * self._points[p] * into[at, None]
        return out

    def rows_before(self, u: np.ndarray) -> np.ndarray:
        """int64 [len(u), n]: R_s(u), the rows of each source in global batches 0 .. u-1."""
        u = np.asarray(u, dtype=np.int64)
        self._check(u, self.horizon + 1)
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
        self._check(u, self.horizon)
        both = self.rows_before(np.concatenate([u, u + 1]))
        return both[len(u) :] - both[: len(u)]

    def target(self, u: np.ndarray) -> np.ndarray:
        """float64 [len(u), n]: T_s(u), the (rounded shares') target rows of batches < u."""
        return self.w(u) / Q

    @property
    def exact_expectations(self) -> bool:
        """Whether `expected_target` is T itself: no ramp, or ramps ending by EXACT_RAMPS."""
        return not self.linear or int(self.steps[-1]) <= EXACT_RAMPS

    def expected_target(self, u: np.ndarray) -> np.ndarray:
        """float64 [len(u), n]: T_s(u) for what is expected before training (a token budget's
        horizon, `python -m packlm.stats`), at a cost independent of u: T itself where
        `exact_expectations`, else the ramps in closed form, the sum of the shares
        themselves rather than of their rounded parts (within B * u / 2^20 rows of T).
        Past `horizon` (a budget never reached) the last point's parts go on in float."""
        u = np.asarray(u, dtype=np.int64)
        out = np.empty((len(u), self.n), dtype=np.float64)
        far = u > self.horizon
        if self.exact_expectations:
            out[~far] = self.target(u[~far])
            last = self._w_point(len(self.steps) - 1) / Q  # [n]
        else:
            i = np.searchsorted(self.steps, u, side="right") - 1
            ramp = i < len(self.steps) - 1
            starts = np.cumsum(
                [np.zeros(self.n), *map(self._ramp_integral, range(len(self.steps) - 1))], axis=0
            )  # [P, n]
            into = (u - self.steps[i]).astype(np.float64)
            j = np.minimum(i + 1, len(self.steps) - 1)
            length = np.maximum(self.steps[j] - self.steps[i], 1).astype(np.float64)
            slope = (self.shares[j] - self.shares[i]) / length[:, None]  # [m, n] share per step
            inside = into[:, None] * self.shares[i] + slope * (into * (into - 1) / 2)[:, None]
            after = into[:, None] * self._points[i] / Q
            out[:] = starts[i] + self.rows * np.where(ramp[:, None], inside, after)
            last = starts[-1]
        if far.any():
            into = (u[far] - self.steps[-1]).astype(np.float64)
            out[far] = last + self.rows * into[:, None] * (self._points[-1] / Q)
        return out

    def _ramp_integral(self, i: int) -> np.ndarray:
        """float64 [n]: B * the shares summed over ramp i's steps (the linear ones, exactly)."""
        length = float(self.steps[i + 1] - self.steps[i])
        return self.rows * (
            length * self.shares[i] + (self.shares[i + 1] - self.shares[i]) * (length - 1) / 2
        )


class RampSums:
    """The parts of a ramp's steps (from point `first` to point `end`) summed from its start,
    block by block of BLOCK steps: a block's sum is added when a step at or past it is first
    asked for, so the cost follows the steps asked for (n int64 kept a block, and the prefix
    sums of the last two blocks used), never the ramp's length; the same sums as one
    cumulative sum over the whole ramp."""

    def __init__(self, parts: Callable[[np.ndarray], np.ndarray], first: int, end: int, n: int):
        self.parts, self.first, self.end = parts, first, end
        self._starts = [np.zeros(n, dtype=np.int64)]  # [n] each: the parts before each block
        self._blocks: dict[int, np.ndarray] = {}  # the last two blocks' prefix sums

    def before(self, into: np.ndarray) -> np.ndarray:
        """int64 [len(into), n]: the parts of the ramp's steps before step `into` of it."""
        into = np.asarray(into, dtype=np.int64)
        b = into // BLOCK  # [m] the block of each
        out = np.empty((len(into), len(self._starts[0])), dtype=np.int64)
        for block in np.unique(b).tolist():
            at = b == block
            out[at] = self._start(block) + self._prefix(block)[into[at] - block * BLOCK]
        return out

    def _prefix(self, block: int) -> np.ndarray:
        """int64 [k+1, n]: the parts of the block's first 0 .. k steps."""
        if block not in self._blocks:
            lo = self.first + block * BLOCK
            parts = self.parts(np.arange(lo, min(lo + BLOCK, self.end)))  # [k, n]
            zero = np.zeros((1, len(self._starts[0])), dtype=np.int64)
            if len(self._blocks) >= 2:
                del self._blocks[next(iter(self._blocks))]  # the older of the two
            self._blocks[block] = np.concatenate([zero, np.cumsum(parts, axis=0)])
        return self._blocks[block]

    def _start(self, block: int) -> np.ndarray:
        """int64 [n]: the parts of the blocks before `block` (their sums added once each)."""
        if (block - len(self._starts)) * BLOCK > MAX_SUM:
            raise ConfigError(
                f"global batch {self.first + block * BLOCK:,}: a linear ramp of the mixture "
                f"schedule sums each step's rounded shares from its start (global batch "
                f"{self.first:,}), {(block - len(self._starts) + 1) * BLOCK:,} steps to sum, more "
                f"than {MAX_SUM:,} at once; trace a nearer step, or give the ramp a nearer point"
            )
        while len(self._starts) <= block:
            k = len(self._starts) - 1
            self._starts.append(self._starts[k] + self._prefix(k)[-1])
        return self._starts[block]
