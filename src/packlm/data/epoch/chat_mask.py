"""The chat mask on a plan's pieces, without building a batch: which tokens a piece reads
may be targets, so the curriculum counts exactly the targets the loader will label.

The rule is `WindowDataset`'s (packlm.data.epoch.loader): a token may be a target iff its
role code trains under data.chat_supervised (`supervised_table`; plain text always does) and
it is not a BOS (data.bos: document position 0). `packlm.batch.piece_targets` then removes
each segment's first token, as collate's labels do. A store without conversations
(`TokenStore.roles` None) has no ChatMask: every token may be a target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packlm.tokenizer.chat import supervised_table

TOKENS = 1 << 21
"""Tokens whose roles are read at once: a chunk's temporaries are ~18 bytes a token (int64
store index and its arange, uint8 role, bool), so ~38 MB; a sample of window T reads at
most T+1 tokens, so ~18 (T+1) bytes a sample (`samples_per_chunk`)."""


@dataclass(frozen=True)
class ChatMask:
    """A conversation store's role codes and the run's data.chat_supervised and data.bos."""

    doc_offsets: Any  # int64 [n_docs+1] (a memmap, or a shard union's ConcatArray)
    roles: Any  # uint8 [n_tokens] role code of each store token
    table: np.ndarray  # bool [256]: role code -> may a token with it be a target
    bos: bool  # data.bos: document position 0 is a BOS, position p >= 1 store token p-1

    @classmethod
    def of(cls, store: Any, chat_supervised: str, bos: bool) -> ChatMask | None:
        """The mask of `store` (None for a store of plain text only: nothing to read)."""
        roles = getattr(store, "roles", None)
        if roles is None:
            return None
        return cls(store.doc_offsets, roles, supervised_table(chat_supervised), bool(bos))

    @staticmethod
    def samples_per_chunk(window: int) -> int:
        """Samples whose pieces `allowed` may take at once within TOKENS."""
        return max(1, TOKENS // (window + 1))

    def allowed(
        self, doc: np.ndarray, start: np.ndarray, length: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Of pieces (store document, start in the document, tokens read; int64 [p], each
        length >= 1, the plan's positions, BOS counted): (int64 [p] tokens of each piece that
        may be a target, bool [p] may its first token be one)."""
        doc, start, length = (np.asarray(a, dtype=np.int64) for a in (doc, start, length))
        has_bos = (start == 0) if self.bos else np.zeros(len(doc), dtype=bool)  # [p]
        stored = length - has_bos  # [p] store tokens read (a BOS is not one)
        first = np.asarray(self.doc_offsets[doc], dtype=np.int64) + start - self.bos + has_bos
        n = int(stored.sum())
        if n == 0:
            return np.zeros(len(doc), dtype=np.int64), np.zeros(len(doc), dtype=bool)
        begins = np.cumsum(stored) - stored  # [p] each piece's first index in the flat read
        index = np.repeat(first - begins, stored)  # [n] store index = this + flat position
        index += np.arange(n)
        ok = np.zeros(n + 1, dtype=bool)  # [n+1]: a False after the last, so that a piece
        ok[:n] = self.table[np.asarray(self.roles[index])]  # of only a BOS may begin at n
        del index
        count = np.add.reduceat(ok, begins, dtype=np.int64)  # [p]; a BOS-only piece: ok[begin]
        count[stored == 0] = 0
        lead = (stored > 0) & ~has_bos & ok[begins]
        return count, lead
