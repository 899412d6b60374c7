"""Conversations in a trace: each token's role code (the store's roles.bin), which targets the
chat mask keeps (data.chat_supervised, as the loader applies it), and the turn (index in the
conversation, role) each piece's tokens belong to."""

from __future__ import annotations

from typing import Any

import numpy as np

from packlm.batch import IGNORE_INDEX
from packlm.data.store.chat_overflow import turn_roles, turn_starts
from packlm.tokenizer.chat import CODE_NAMES, MARKUP


def document_codes(store, d: int, begin: int, length: int, bos: bool) -> np.ndarray:
    """uint8: role codes of tokens [begin, begin+length) of document d as the plan counts them
    (with data.bos position 0 is the BOS: MARKUP, never a target)."""
    pos = np.arange(begin, begin + length)
    first = int(store.doc_offsets[d])
    read = np.asarray(store.roles[first + np.maximum(pos - int(bos), 0)], dtype=np.uint8)
    return np.where(bos & (pos == 0), MARKUP, read).astype(np.uint8)


def conversation_turns(store, d: int, start_id: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(starts int64 [k]: store positions inside document d of each turn's `<|im_start|>`,
    role codes uint8 [k]) of a conversation; None for a plain-text document (it opens with
    no `<|im_start|>`). Reads the whole document: a conversation fits one sample
    (data.chat_overflow)."""
    a, b = int(store.doc_offsets[d]), int(store.doc_offsets[d + 1])
    if b == a or int(store.roles[a]) != MARKUP:
        return None
    ids = np.asarray(store.tokens[a:b], dtype=np.int64)
    codes = np.asarray(store.roles[a:b], dtype=np.uint8)
    starts = turn_starts(ids, codes, start_id)
    if len(starts) == 0:
        return None
    return starts, turn_roles(codes, np.append(starts, b - a))


def piece_turns(
    turns: tuple[np.ndarray, np.ndarray], first_turn: int, begin: int, length: int, bos: bool,
    column: int, labels: np.ndarray,
) -> list[dict[str, Any]]:  # fmt: skip
    """The turns a piece (plan positions [begin, begin+length) of its document, placed at
    row `column`) holds: {turn (index in the whole conversation: a cut piece's first turn
    `first_turn` counted), role, row_columns [lo, hi) of its tokens, targets: the row's
    labels whose target token is in it}. labels: int64 [T] of the row."""
    starts, roles = turns
    store_pos = np.arange(begin, begin + length) - int(bos)  # [L] -1: the BOS
    turn = np.searchsorted(starts, store_pos, side="right") - 1  # [L] -1: before any turn
    target = np.zeros(length, dtype=bool)  # [L]: is this token a kept target
    lo, hi = max(column, 1), min(column + length, len(labels) + 1)  # target columns
    if hi > lo:
        target[lo - column : hi - column] = labels[lo - 1 : hi - 1] != IGNORE_INDEX
    out = []
    for k in np.unique(turn[turn >= 0]).tolist():
        where = np.flatnonzero(turn == k)
        out.append(
            {
                "turn": first_turn + k,
                "role": CODE_NAMES[int(roles[k])],
                "row_columns": [column + int(where[0]), column + int(where[-1]) + 1],
                "targets": int(target[where].sum()),
            }
        )
    return out
