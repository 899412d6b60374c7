"""data.skip_documents and data.skip_steps: take part of the plan out of training, exactly.

Neither changes the epoch plan (document order, packs, windows, sample order, curriculum
switches): a loss spike is removed and everything else of the run is reproduced.

- skip_documents: the documents' tokens stay where the plan puts them (every other sample
  reads what it read before), but no label has one of them as its input or its target
  (`packlm.batch.drop_skipped`). With packing document/none a document attends to no other,
  so a skipped document then takes no part in the loss; under stream packing its tokens are
  still context for the later tokens of the same row.
- skip_steps: optimizer steps of the *plan*: the steps a run without skip_steps logs
  (`global_step`), i.e. each epoch's global batches in blocks of `accumulate_grad_batches`
  (the last block of an epoch may be shorter), counted from the run's start. The sampler
  leaves out the global batches of those steps and deals the next ones, so a run skipping
  step k logs as its step k what the plan's step k+1 is. A left-out step is a whole block,
  so every other block keeps its place and Lightning's step count stays aligned with the
  plan's; the numbering never depends on the other entries of the list (it is a set), so a
  resume may add a later step. `python -m packlm.trace` gives every logged step's plan step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packlm.data.epoch.indexing import interval_of
from packlm.data.epoch.plan import EpochPlan
from packlm.data.store.sources.document import split_turn
from packlm.errors import ConfigError

CHUNK = 1 << 16
"""Samples whose pieces are read at once when counting (bounds `EpochPlan.pieces`)."""


def resolve_documents(store: Any, entries: Sequence[Any]) -> np.ndarray:
    """int64 sorted store documents of data.skip_documents: an index, a full doc id
    ("source:path[:record]") or the id without its source ("path[:record]", what the trace
    prints). An id held by several documents (one file in two sources) names them all; a
    conversation's id names every piece of it when data.chat_overflow cut it ("path:record"
    matches "path:record@turn<k>"; the piece's own id names that piece alone)."""
    indices = [e for e in entries if isinstance(e, int)]
    bad = [i for i in indices if i >= store.n_docs]
    if bad:
        raise ConfigError(
            f"data.skip_documents: document {bad[0]} is not in the training store "
            f"({store.n_docs} documents: 0..{store.n_docs - 1})"
        )
    names = [e for e in entries if isinstance(e, str)]
    found: list[int] = []
    if names:
        wanted = set(names)
        seen: set[str] = set()
        for d in range(store.n_docs):  # only when ids are given: reads doc_ids.txt once
            doc_id = store.doc_id(d)
            whole = split_turn(doc_id)[0]  # a cut conversation's piece: the conversation
            hits = {doc_id, doc_id.partition(":")[2], whole, whole.partition(":")[2]} & wanted
            if hits:
                found.append(d)
                seen |= hits
        missing = [n for n in names if n not in seen]
        if missing:
            raise ConfigError(
                f"data.skip_documents: no training document has the id {missing[0]!r} (give "
                '"path:record" or "path" as python -m packlm.trace prints it, or the store index)'
            )
    return np.unique(np.asarray(indices + found, dtype=np.int64))


@dataclass(frozen=True)
class StepSkips:
    """data.skip_steps as plan steps (see the module doc) and how to find their batches."""

    accumulate: int = 1  # global batches per optimizer step (trainer.accumulate_grad_batches)
    plan_steps: frozenset[int] = field(default_factory=frozenset)  # data.skip_steps

    @classmethod
    def of(cls, steps: Sequence[int], accumulate: int = 1) -> StepSkips:
        return cls(int(accumulate), frozenset(int(k) for k in steps))

    def __bool__(self) -> bool:
        return bool(self.plan_steps)

    def dropped(self, steps_before: int, batch: int) -> bool:
        """Whether plan global batch `batch` of an epoch after `steps_before` plan steps is
        left out."""
        return steps_before + batch // self.accumulate in self.plan_steps

    def count(self, steps_before: int, lo: int, hi: int) -> int:
        """Plan global batches in [lo, hi) of such an epoch that are left out (in Python ints:
        a step near 2^63 times the accumulation wrapped around in int64 and counted batches
        0 .. accumulate-1)."""
        a, total = self.accumulate, 0
        for k in self.plan_steps:
            d = k - steps_before
            total += max(0, min((d + 1) * a, hi) - max(d * a, lo))
        return total

    def plan_step(self, logged: int) -> int:
        """The plan step that a run with these skips trains as its step `logged` (the
        logged-th plan step not left out)."""
        step = logged
        for d in sorted(self.plan_steps):
            if d <= step:
                step += 1
        return step

    def logged_step(self, plan_step: int) -> int | None:
        """The step a run with these skips logs for a plan step; None: the step is left out."""
        if plan_step in self.plan_steps:
            return None
        return plan_step - sum(d < plan_step for d in self.plan_steps)


def document_counts(plan: EpochPlan, docs: np.ndarray) -> tuple[int, int]:
    """(samples, tokens): the epoch's samples that read a token of store documents `docs`,
    and those tokens (every read counted; windows that overlap read a token twice).

    Window starts rise with the window index (the grid, moved forward less than a stride by
    data.snap), so only the windows of the grid near each copy of a document are read, plus
    each sequence's first and last (a short or a cover window)."""
    if len(docs) == 0 or plan.n_samples == 0:
        return 0, 0
    j = np.flatnonzero(np.isin(plan.order, docs))  # epoch documents that are copies of docs
    seqs = j if plan.seq_first is None else interval_of(plan.seq_first, j)
    a = plan.doc_start(j)  # [c] stream span of each copy
    b = a + plan.doc_lengths[plan.order[j]]
    start, _, offset, _ = plan.layout(seqs)
    reach = plan.window + 1 + (plan.snap_tolerance or 0)  # a window touches [g, g + reach)
    window_cum = plan.window_cum
    count = window_cum[seqs + 1] - window_cum[seqs]  # [c] windows of each copy's sequence
    lo = np.clip((a - start - offset - reach) // plan.stride, 0, count - 1)
    hi = np.clip(-(-(b - start - offset) // plan.stride) + 1, 1, count)
    first = window_cum[seqs]
    ids = [np.arange(f + x, f + y) for f, x, y in zip(first, lo, hi, strict=True)]
    ids = np.unique(np.concatenate([*ids, first, first + count - 1]))  # samples to read
    ids = ids[(ids >= 0) & (ids < plan.n_samples)]  # (a sequence without a window adds none)
    samples = tokens = 0
    for c in range(0, len(ids), CHUNK):
        row, doc, _, length = plan.pieces(ids[c : c + CHUNK])
        hit = np.isin(doc, docs)
        samples += len(np.unique(row[hit]))
        tokens += int(length[hit].sum())
    return samples, tokens
