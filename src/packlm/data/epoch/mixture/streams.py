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

import hashlib
from collections.abc import Callable
from dataclasses import replace

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


def source_seed(seed: int, name: str) -> int:
    """The plan seed of one source's passes: independent per (data.seed, source name)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little")


def source_plan(
    doc_lengths: np.ndarray,
    cfg: DataConfig,
    source: int,
    pass_: int,
    docs: np.ndarray,
    doc_groups: np.ndarray | None = None,
    paragraphs: ParagraphIndex | None = None,
) -> EpochPlan:
    """Pass `pass_` of one source's stream: the ordinary plan (`build_plan`) over its
    documents `docs` (int, ascending store indices) alone, seeded by (data.seed, its name).

    Built over the source's own lengths (the cost of a pass is the source's size, so a
    small source read thousands of times stays cheap), then put in store coordinates: the
    same plan as `build_plan` over the whole store with the other sources' weight 0.
    `paragraphs` (data.snap=paragraph): the store's, `ParagraphIndex.of` the whole store."""
    mine = replace(cfg, seed=source_seed(cfg.seed, mixture_names(cfg)[source]))
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
        self._counts: list[list[int]] = [[] for _ in names]  # samples of each pass so far
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
        """Samples of pass p of a source (its passes 0 .. p are counted once)."""
        counts = self._counts[source]
        while len(counts) <= p:
            counts.append(self.plan(source, len(counts)).n_samples)
        return counts[p]

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
        counts, top = self._counts[source], int(k.max())
        total = sum(counts)
        while not counts or total <= top:  # count the passes up to the furthest row
            if self.pass_samples(source, len(counts)) == 0:
                raise ConfigError(self._empty(source))
            total += counts[-1]
        ends = np.cumsum(counts)  # [passes counted]
        passes = np.searchsorted(ends, k, side="right")
        return passes, k - (ends - np.asarray(counts))[passes]

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
