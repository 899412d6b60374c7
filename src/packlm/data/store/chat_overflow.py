"""Conversations longer than a sample: dropped, or cut between turns (data.chat_overflow).

A conversation is one document; a sample reads at most `max_tokens` of it (`max_tokens`:
window+1, or data.pack_size when smaller, less the BOS with data.bos). A longer one would be
cut by the windows wherever they fall, mid-answer. At store build time instead:

- `drop`: the whole conversation is left out;
- `cut_turns`: it becomes several documents, each a run of whole turns that ends with an
  assistant turn and fits `max_tokens` (greedy from the first turn: each piece takes as many
  turns as fit). A turn that cannot start a fitting piece (its exchange up to the next
  assistant turn is longer than `max_tokens`) is dropped, context first; so is what follows
  the last assistant turn when it no longer fits. Every kept assistant turn is whole, with
  its context inside the same piece. The conversation's EOS stays with its last turn.

The pieces keep the conversation's id with "@turn{k}" (k: the piece's first turn) after it,
so a trace names the turn of each token. Every token is counted: the store's tokens plus
`tokens_dropped` equal the rendered conversations' tokens (`tokens_in`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from packlm.data.store.sources.document import TURN_MARK
from packlm.tokenizer.chat import MARKUP, ROLE_CODES

POLICIES = ("drop", "cut_turns")
ASSISTANT = ROLE_CODES["assistant"]


@dataclass(frozen=True)
class Overflow:
    """data.chat_overflow and the longest conversation a sample holds."""

    policy: str
    max_tokens: int

    @classmethod
    def of(cls, data) -> Overflow:
        """From the data config: one sample's tokens (window+1, pack_size when smaller) less
        the BOS (data.bos)."""
        size = data.window + 1 if data.pack_size is None else min(data.window + 1, data.pack_size)
        return cls(data.chat_overflow, size - bool(data.bos))

    def fingerprint(self) -> dict:
        return {"policy": self.policy, "max_tokens": self.max_tokens}


def turn_starts(ids: np.ndarray, codes: np.ndarray, start_id: int) -> np.ndarray:
    """int64 positions of each turn's `<|im_start|>` in one conversation (a user's typed
    "<|im_start|>" is ordinary text, never this id)."""
    return np.flatnonzero((ids == start_id) & (codes == MARKUP))


def cut_turns(lengths: np.ndarray, assistant: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """Pieces [first, last] (turn indices, inclusive) of a conversation whose turns have
    `lengths` tokens and `assistant` roles: each fits `max_tokens`, ends with an assistant
    turn (or the conversation's last turn after one in the piece); greedy, context dropped
    first (module doc). Turns in no piece are dropped."""
    pieces = []
    i, n = 0, len(lengths)
    while i < n:
        total, best, has_assistant = 0, None, False
        for j in range(i, n):  # turns, not tokens: a handful per conversation
            total += int(lengths[j])
            if total > max_tokens:
                break
            has_assistant |= bool(assistant[j])
            if assistant[j] or (j == n - 1 and has_assistant):
                best = j
        if best is None:
            i += 1  # turn i cannot start a piece: dropped
        else:
            pieces.append((i, best))
            i = best + 1
    return pieces


def apply_overflow(
    ids: np.ndarray, lengths: np.ndarray, codes: np.ndarray, doc_ids: list[str],
    sources: list[int], overflow: Overflow, start_id: int, counts: Counter,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[int]]:  # fmt: skip
    """The documents of one write with each over-long conversation dropped or cut (module
    doc): (ids, lengths, codes, doc_ids, sources). `counts` gains tokens_in (conversation
    tokens seen), tokens_dropped, conversations_cut, conversations_dropped, turns_dropped."""
    stops = np.cumsum(lengths)
    starts = stops - lengths
    is_chat = np.zeros(len(lengths), dtype=bool)
    nonempty = lengths > 0
    is_chat[nonempty] = codes[starts[nonempty]] == MARKUP  # a conversation opens with <|im_start|>
    counts["tokens_in"] += int(lengths[is_chat].sum())
    over = np.flatnonzero(is_chat & (lengths > overflow.max_tokens))
    if len(over) == 0:
        return ids, lengths, codes, doc_ids, sources
    keep = np.ones(len(ids), dtype=bool)  # [n tokens]
    out_lengths: list[int] = []
    out_ids: list[str] = []
    out_sources: list[int] = []
    over_set = set(over.tolist())
    for d in range(len(lengths)):
        a, b = int(starts[d]), int(stops[d])
        if d not in over_set:
            out_lengths.append(b - a)
            out_ids.append(doc_ids[d])
            out_sources.append(sources[d])
            continue
        keep[a:b] = False
        bounds = np.append(turn_starts(ids[a:b], codes[a:b], start_id), b - a)  # [turns+1]
        if overflow.policy == "drop":
            pieces = []
        else:
            role = turn_roles(codes[a:b], bounds)  # [turns]
            pieces = cut_turns(np.diff(bounds), role == ASSISTANT, overflow.max_tokens)
        kept_turns = 0
        for first, last in pieces:
            lo, hi = a + int(bounds[first]), a + int(bounds[last + 1])
            keep[lo:hi] = True
            out_lengths.append(hi - lo)
            out_ids.append(f"{doc_ids[d]}{TURN_MARK}{first}")
            out_sources.append(sources[d])
            kept_turns += last - first + 1
        counts["tokens_dropped"] += (b - a) - sum(
            int(bounds[last + 1] - bounds[first]) for first, last in pieces
        )
        counts["turns_dropped"] += len(bounds) - 1 - kept_turns
        counts["conversations_cut" if pieces else "conversations_dropped"] += 1
    return ids[keep], np.asarray(out_lengths, dtype=np.int64), codes[keep], out_ids, out_sources


def turn_roles(codes: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """uint8 role code of each turn [bounds[k], bounds[k+1]): its `<|im_end|>` carries it
    (content may be empty), the first code past MARKUP inside the turn."""
    role_at = np.flatnonzero(codes > MARKUP)  # content and <|im_end|> tokens
    return codes[role_at[np.searchsorted(role_at, bounds[:-1])]]
