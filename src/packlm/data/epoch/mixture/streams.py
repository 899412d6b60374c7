"""A mixture's per-source sample streams and the global batches dealt from them.

Source s's stream is its passes p = 0, 1, 2, ... laid end to end; pass p is the ordinary
epoch plan (every packing mode, window, stride, offset and tail rule) built over source s's
documents alone, with the seed f(data.seed, source name) and epoch p. So a small source that
its share upsamples is read in a fresh order, with fresh offsets, on every pass.

Global batch G (all ranks, B rows) takes rows R_s(G) .. R_s(G+1)-1 of each source's stream
(`Allocation`), and its B rows are shuffled by (seed, G) before rank r takes positions
r, r+w, ... (the sampler's rule), so every rank sees every source. An epoch under a mixture
is a fixed number of global batches: ceil(the samples of every source's pass 0 / B), what
one pass over each source would take at its natural size.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from packlm.config.data import DataConfig
from packlm.config.mixture import mixture_names
from packlm.data.epoch.indexing import index_dtype
from packlm.data.epoch.mixture.allocation import Allocation
from packlm.data.epoch.plan import EpochPlan, build_plan
from packlm.data.epoch.snap import ParagraphIndex
from packlm.errors import ConfigError

BATCH_ORDER = 7
"""The random purpose of the row order of a global batch (next to order.py's DOCS ... GROUPS)."""
MAX_PASSES = 1 << 20
"""The most passes of one source one look-up may count (each is a plan of the source, 0.07 to
0.3 ms for a small one): a row further from the passes counted is refused naming the source,
before any is counted (a trace of a step billions of rows away ran for days)."""
KEEP = 4096
"""Passes counted before those wholly behind the rows asked are let go (memory: the passes
a look-up spans, not all the passes a long run has dealt)."""


def source_seed(seed: int, name: str) -> int:
    """The plan seed of one source's passes: independent per (data.seed, source name)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little")


def source_config(cfg: DataConfig, source: int) -> DataConfig:
    """The plan config of one source's passes: data.* with the seed of (data.seed, its name).
    Made once per source: each of its passes takes it (`source_plan`)."""
    return replace(cfg, seed=source_seed(cfg.seed, mixture_names(cfg)[source]))


def source_plan(
    doc_lengths: np.ndarray,
    mine: DataConfig,
    pass_: int,
    docs: np.ndarray,
    doc_groups: np.ndarray | None = None,
    paragraphs: ParagraphIndex | None = None,
) -> EpochPlan:
    """Pass `pass_` of one source's stream: the ordinary plan (`build_plan`) over its
    documents `docs` (int, ascending store indices) alone, with `mine`, the source's
    `source_config`.

    Built over the source's own lengths (the cost of a pass is the source's size, so a
    small source read thousands of times stays cheap), then put in store coordinates: the
    same plan as `build_plan` over the whole store with the other sources' weight 0.
    `paragraphs` (data.snap=paragraph): the store's, `ParagraphIndex.of` the whole store."""
    # the source's groups numbered 0.. among themselves (data.group_by=directory)
    groups = (
        None
        if doc_groups is None
        else np.unique(np.asarray(doc_groups)[docs], return_inverse=True)[1]
    )
    # paragraph starts are looked up in store coordinates: set below, not the subset's
    stand_in = None if paragraphs is None else np.zeros(0, dtype=np.int64)
    plan = build_plan(np.asarray(doc_lengths)[docs], mine, pass_, None, None, groups, stand_in)
    plan.order = docs[plan.order].astype(index_dtype(len(doc_lengths)))
    plan.doc_lengths = np.asarray(doc_lengths, dtype=np.int64)
    plan.paragraphs = paragraphs
    return plan


class SourceStreams:
    """The mixture's global batches. `plan_of(source, pass)` gives a pass's plan (cached
    by the caller or not: two per source are kept here); `names` the sources."""

    def __init__(
        self,
        plan_of: Callable[[int, int], EpochPlan],
        names: list[str],
        allocation: Allocation,
        seed: int,
    ):
        self.plan_of = plan_of
        self.names = names
        self.allocation = allocation
        self.seed = seed
        self._counts: list[list[int]] = [[] for _ in names]  # samples of each pass counted
        self._first = [0] * len(names)  # the first pass kept (a resume's, `resume_from`)
        self._start = [0] * len(names)  # the stream row where it starts
        self._pass0: dict[int, int] = {}  # samples of pass 0, when counting starts later
        self._plans: dict[tuple[int, int], EpochPlan] = {}

    @property
    def rows(self) -> int:
        return self.allocation.rows

    def plan(self, source: int, p: int) -> EpochPlan:
        key = (source, p)
        if key not in self._plans:
            mine = [k for k in self._plans if k[0] == source]
            for old in sorted(mine, key=lambda k: k[1])[:-1]:  # keep this source's latest
                del self._plans[old]
            self._plans[key] = self.plan_of(source, p)
        return self._plans[key]

    def pass_samples(self, source: int, p: int) -> int:
        """Samples of pass p of a source (the passes from the first counted to p, once)."""
        counts, first = self._counts[source], self._first[source]
        if p < first:  # before a resume's point: pass 0 (an epoch's length), else built
            if p != 0:
                return self.plan(source, p).n_samples
            if source not in self._pass0:
                self._pass0[source] = self.plan(source, 0).n_samples
            return self._pass0[source]
        while len(counts) <= p - first:
            counts.append(self.plan(source, first + len(counts)).n_samples)
        return counts[p - first]

    def check(self) -> None:
        """Refuse, before training, a source that some step gives rows but has no sample."""
        for s in range(len(self.names)):
            if self.allocation.shares[:, s].max() > 0 and self.pass_samples(s, 0) == 0:
                raise ConfigError(self._empty(s))

    def _empty(self, source: int) -> str:
        return (
            f"data.sources: the source {self.names[source]!r} has a share but no training "
            "document (all of a small source may go to validation by data.val_fraction); "
            "give it share 0, or give data.val_sources"
        )

    def epoch_batches(self) -> int:
        """Global batches of one epoch: one pass of every source at its natural size."""
        total = sum(self.pass_samples(s, 0) for s in range(len(self.names)))
        return max(1, -(-total // self.rows))

    def locate(self, source: int, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pass, position in that pass's sample order) of stream rows k (int64)."""
        k = np.asarray(k, dtype=np.int64)
        if len(k) == 0:
            return k, k
        row = int(k.min())
        if row < self._start[source]:  # before a resume's point: count back to it, or from
            # pass 0 where that is fewer passes (a trace of a deep run's first steps)
            if 2 * row < self._first[source] * self.pass_samples(source, 0):
                self._first[source], self._start[source], self._counts[source] = 0, 0, []
            else:
                self._count_back(source, row)
        counts, top = self._counts[source], int(k.max())
        total = self._start[source] + sum(counts)
        self._check_reach(source, top - total)
        while not counts or total <= top:  # count the passes up to the furthest row
            if self.pass_samples(source, self._first[source] + len(counts)) == 0:
                raise ConfigError(self._empty(source))
            total += counts[-1]
            if len(counts) > KEEP:
                self._drop_before(source, row)
        self._drop_before(source, row)
        first = self._first[source]
        ends = self._start[source] + np.cumsum(counts)  # [passes kept]
        passes = np.searchsorted(ends, k, side="right")
        return first + passes, k - (ends - np.asarray(counts))[passes]

    def _drop_before(self, source: int, row: int) -> None:
        """Let go of the counted passes that end at or before stream row `row` (a row before
        them is found again by counting back, as from a resume point)."""
        counts, start, j = self._counts[source], self._start[source], 0
        while j < len(counts) - 1 and start + counts[j] <= row:
            start += counts[j]
            j += 1
        del counts[:j]
        self._first[source] += j
        self._start[source] = start

    def _check_reach(self, source: int, rows: int) -> None:
        """Refuse, before counting, rows about MAX_PASSES or more passes from those counted."""
        per_pass = self.pass_samples(source, 0)
        if per_pass and rows // per_pass >= MAX_PASSES:
            raise ConfigError(
                f"the mixture source {self.names[source]!r}: the row asked is about "
                f"{rows // per_pass:,} passes of it ({per_pass:,} samples each) from the "
                f"passes counted, each a plan to build (at most {MAX_PASSES:,} at once); trace "
                "a step nearer the run's checkpoint (counting starts from its resume point)"
            )

    def _count_back(self, source: int, row: int) -> None:
        """Count the passes before the first counted, back to the one holding `row`."""
        self._check_reach(source, self._start[source] - row)
        first, start, back = self._first[source], self._start[source], []
        while row < start:
            first -= 1  # before the first counted: pass_samples builds it apart
            if first < 0:  # a resume point beyond the rows its passes hold
                raise ConfigError(
                    f"the checkpoint's loader state: mixture_passes[{self.names[source]!r}] "
                    "starts past the rows of the passes before it"
                )
            back.append(self.pass_samples(source, first))
            start -= back[-1]
        self._counts[source][:0] = back[::-1]
        self._first[source], self._start[source] = first, start

    def resume_point(self, g: int) -> dict[str, list[int]]:
        """{source name: [pass, its first stream row]} of the pass holding each source's first
        row of global batch g: what `resume_from` needs to deal g on without counting the
        passes before it (a small source upsampled for long runs has hundreds of thousands);
        rows before it are found by counting back from it, or on from pass 0 where that is
        nearer (a trace of the steps before)."""
        rows = self.allocation.rows_before(np.asarray([g]))[0]  # [sources]
        point = {}
        for s, name in enumerate(self.names):
            if self.allocation.shares[:, s].max() > 0:  # a source never dealt is not counted
                p, at = self.locate(s, rows[s : s + 1])
                point[name] = [int(p[0]), int(rows[s] - at[0])]
        return point

    def resume_from(self, point: dict[str, Any]) -> None:
        """Count each named source's passes from [pass, its first stream row] on (a
        checkpoint's `resume_point`); names not in this mixture are left out."""
        for s, name in enumerate(self.names):
            if name not in point:
                continue
            entry, p, start = point[name], -1, -1
            if isinstance(entry, list | tuple) and len(entry) == 2:
                with contextlib.suppress(TypeError, ValueError):
                    p, start = int(entry[0]), int(entry[1])
            if p < 0 or start < 0 or (p == 0) != (start == 0):
                raise ConfigError(
                    f"the checkpoint's loader state: mixture_passes[{name!r}] = {entry!r} "
                    "is not [pass, its first stream row] (pass 0 starts at row 0)"
                )
            self._first[s], self._start[s], self._counts[s] = p, start, []

    def batch_sources(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, stream row) of each of global batch g's B rows, in the batch's order."""
        first = self.allocation.rows_before(np.asarray([g, g + 1]))  # [2, n]
        counts = first[1] - first[0]
        source = np.repeat(np.arange(len(self.names)), counts)  # [B]
        row = first[0][source] + (
            np.arange(self.rows) - np.repeat(np.cumsum(counts) - counts, counts)
        )
        order = np.random.default_rng([self.seed % 2**64, g, BATCH_ORDER]).permutation(self.rows)
        return source[order], row[order]

    def pieces(self, g: int, slots: np.ndarray) -> np.ndarray:
        """int64 [4, p]: the document pieces of global batch g's rows at `slots` (this rank's
        positions), rows numbered 0 .. len(slots)-1 in slot order."""
        source, row = self.batch_sources(g)
        source, row = source[slots], row[slots]
        out = []
        for s in np.unique(source):
            local = np.flatnonzero(source == s)  # [r] this rank's rows from source s
            k = row[local]
            passes, positions = self.locate(int(s), k)
            for p in np.unique(passes):
                at = passes == p
                plan = self.plan(int(s), int(p))
                r, doc, start, length = plan.pieces(plan.sample_ids(positions[at]))
                out.append(np.stack([local[at][r], doc, start, length]))
        if not out:
            return np.zeros((4, 0), dtype=np.int64)
        pieces = np.concatenate(out, axis=1)
        return pieces[:, np.argsort(pieces[0], kind="stable")]  # rows in order, pieces kept
