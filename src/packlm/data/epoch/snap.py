"""Window starts snapped to boundaries (`data.snap`), and the paragraph starts they use.

A window start that is not its sequence's first moves forward to the next boundary (a
document start; with `paragraph` also a paragraph start) when one lies within
`data.snap_tolerance` tokens and leaves at least 2 tokens (one input, one target) before the
sequence's end; otherwise it stays. Paragraph starts come from the store
(`packlm.data.store.paragraphs`) as sorted store positions; `ParagraphIndex` maps them to the
plan's document coordinates, where a document may carry a BOS the store does not hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ParagraphIndex:
    """The store's paragraph starts, looked up by (store document, position in the plan's
    document). 8 bytes per store document (the offsets) plus the store's array (a memmap)."""

    starts: np.ndarray  # uint32/int64 [P]: sorted store positions of paragraph starts
    offsets: np.ndarray  # int64 [n_docs+1]: store position of each document, then the total
    bos: int  # 1 when the plan's documents start with a BOS the store does not hold

    @classmethod
    def of(cls, starts: np.ndarray, doc_lengths: np.ndarray, bos: bool) -> ParagraphIndex:
        """From the store's starts and the plan's document lengths (BOS included with bos)."""
        offsets = np.zeros(len(doc_lengths) + 1, dtype=np.int64)
        np.cumsum(np.asarray(doc_lengths, dtype=np.int64) - int(bos), out=offsets[1:])
        return cls(starts, offsets, int(bos))

    def next_start(self, doc: np.ndarray, local: np.ndarray) -> np.ndarray:
        """int64 [n]: position in its document of the first paragraph start at or after
        `local` in store document `doc`; -1 where the document has none there."""
        doc = np.asarray(doc, dtype=np.int64)
        q = self.offsets[doc] + np.asarray(local, dtype=np.int64) - self.bos  # [n] store pos
        if len(self.starts) == 0:
            return np.full(len(q), -1, dtype=np.int64)
        k = np.searchsorted(self.starts, np.maximum(q, 0).astype(self.starts.dtype))
        p = self.starts[np.minimum(k, len(self.starts) - 1)].astype(np.int64)
        ok = (k < len(self.starts)) & (p >= self.offsets[doc]) & (p < self.offsets[doc + 1])
        return np.where(ok, p - self.offsets[doc] + self.bos, -1)

    def is_start(self, doc: np.ndarray, local: np.ndarray) -> np.ndarray:
        """bool [n]: is position `local` of store document `doc` a paragraph start."""
        return np.asarray(self.next_start(doc, local) == local)


def snapped_starts(plan, g: np.ndarray, seq_end: np.ndarray) -> np.ndarray:
    """Each start g moved to the next boundary within the plan's snap_tolerance, if one is
    there and leaves at least 2 tokens before the sequence's end."""
    j = plan.locate(g)
    here = plan.doc_start(j)
    nxt = plan.doc_start(np.minimum(j + 1, plan.n_documents))
    if plan.snap == "paragraph":
        local = plan.paragraphs.next_start(plan.order[j], g - here)
        nxt = np.where(local >= 0, here + local, nxt)  # inside the document: before nxt
    nxt = np.where(here == g, g, nxt)
    ok = (nxt - g <= plan.snap_tolerance) & (nxt + 2 <= seq_end)
    return np.where(ok, nxt, g)


def on_boundary(plan, j: np.ndarray, local: np.ndarray) -> np.ndarray:
    """bool [n]: position `local` of epoch document j is a document start, or a paragraph
    start when the plan knows them (built with the store's paragraph starts)."""
    at = np.asarray(local) == 0
    if plan.paragraphs is not None:
        at |= plan.paragraphs.is_start(plan.order[j], local)
    return at
