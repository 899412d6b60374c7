"""The supervised targets of a plan on a store with conversations: the labels the loader gives
under data.chat_supervised (`EpochPlan.chat_mask`), counted from the plan's pieces and the
store's role codes, in total and per source.

The coverage sweep (`coverage.py`) counts window targets per stream position and never reads
a token; the chat mask depends on each token's role, so these counts read the role codes of
every token a sample reads: `ChatMask.allowed` for which may be targets, then
`packlm.batch.targets_of_pieces` removes each segment's first token, as collate does (the
curriculum's count, `packlm.data.epoch.curriculum.sample_targets`, is the same rule per row).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from packlm.batch import targets_of_pieces
from packlm.data.epoch.plan import EpochPlan
from packlm.data.epoch.statistics.coverage import CHUNK


class ChatTargets(NamedTuple):
    total: int  # supervised targets of the epoch's samples
    by_source: np.ndarray  # int64 [n_sources]: of them, per source of the target's document


def chat_targets(plan: EpochPlan, doc_sources: np.ndarray | None, n_sources: int) -> ChatTargets:
    """The targets `plan.chat_mask` keeps over every sample of the plan (a mask must be set).

    Samples are read in chunks of at most `ChatMask.samples_per_chunk` (and CHUNK): a chunk's
    temporaries are ~18 bytes a token read for the roles (`chat_mask.TOKENS` tokens at most,
    ~18 (T+1) bytes a sample) plus `EpochPlan.pieces`' (~0.5 KB a piece while it locates
    documents: [p, 31] int64; one or two pieces a sample unless documents are shorter than
    the window), as the curriculum's count; nothing grows with the epoch. `doc_sources`
    (int [n_docs], the store's; None: no per-source counts): a target counts for the source
    of the document it is in, as the coverage's per-source counts."""
    mask = plan.chat_mask
    n, per_chunk = plan.n_samples, min(CHUNK, mask.samples_per_chunk(plan.window))
    sources = None if doc_sources is None else np.asarray(doc_sources)
    total, by_source = 0, np.zeros(n_sources, dtype=np.int64)
    for a in range(0, n, per_chunk):
        row, doc, start, length = plan.pieces(np.arange(a, min(a + per_chunk, n)))  # [p] each
        per_piece = targets_of_pieces(row, length, plan.packing, mask.allowed(doc, start, length))
        total += int(per_piece.sum())
        if sources is not None and len(doc):
            by_source += np.bincount(sources[doc], weights=per_piece, minlength=n_sources).astype(
                np.int64
            )
    return ChatTargets(total, by_source)
