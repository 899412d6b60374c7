"""Encode ordinary text (no special tokens) to ids: pre-tokenize, then apply the merges
to each pre-token in rank order.

Two engines give the same ids: `PythonEncoder` (always there, the reference) and
tiktoken's Rust core when it is installed and provably equivalent for the vocabulary
(`tiktoken_ranks` says when). tiktoken ranks a pair by the rank of the token it
would form and returns a pre-token that is itself a token at once; that equals merge
order BPE when every merged token encodes to itself and merge ids rise in merge order.
`id_tables` turns a checked vocab and merges into the ids both engines work with.
tiktoken's side, the Encoding and its use, is tiktoken_engine.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import regex

from packlm.tokenizer.formats import excerpt

CACHE_SIZE = 1 << 14  # pre-tokens remembered by the Python engine (bounded memory)
OPEN = 1 << 62  # "not merged away yet", above every rank


def _utf8(piece: str) -> bytes:
    """UTF-8 bytes; a lone surrogate becomes U+FFFD, as tiktoken does."""
    try:
        return piece.encode("utf-8")
    except UnicodeEncodeError:
        return piece.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def id_tables(
    vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]], special_tokens: list[str]
) -> tuple[dict[int, bytes], dict[str, int], list[int], list[tuple[int, int, int]]]:
    """(vocab with the special tokens, special token -> id, byte value -> id, (left id,
    right id, merged id) per merge) of a checked vocabulary; ids are found from the bytes.
    Each special token gets the lowest id holding its bytes, else a new id at the end."""
    vocab = _check_vocab(vocab)
    special_ids = {}
    for s in special_tokens:
        token = s.encode("utf-8")
        found = [i for i, t in vocab.items() if t == token]
        special_ids[s] = min(found) if found else len(vocab)
        vocab.setdefault(special_ids[s], token)
    specials = set(special_ids.values())
    n = len(vocab)  # ordinary bytes -> id (the lowest, should two share them):
    ids_of = {vocab[i]: i for i in range(n - 1, -1, -1) if i not in specials}
    missing = [b for b in range(256) if bytes([b]) not in ids_of]
    if missing:
        raise ValueError(f"vocab: no id for the byte(s) {missing[:8]} (all 256 are needed)")
    byte_ids = [ids_of[bytes([b])] for b in range(256)]
    try:
        merge_ids = [(ids_of[a], ids_of[b], ids_of[a + b]) for a, b in merges]
    except KeyError:  # name the first merge that does not fit
        k = next(k for k, (a, b) in enumerate(merges) if {a, b, a + b} - ids_of.keys())
        raise ValueError(
            f"merges[{k}] = {excerpt(merges[k])}: a token or their merge is not in vocab"
        ) from None
    return vocab, special_ids, byte_ids, merge_ids


def _check_vocab(vocab: dict[int, bytes]) -> dict[int, bytes]:
    if not isinstance(vocab, dict) or not vocab:
        raise ValueError("vocab: expected a non-empty dict[int, bytes]")
    if all(type(i) is int for i in vocab) and all(type(t) is bytes for t in vocab.values()):
        out = dict(vocab)  # the common case, checked without a Python step per entry
    else:
        out = {}
        for i, t in vocab.items():
            if (
                isinstance(i, bool)
                or not isinstance(i, int)
                or not isinstance(t, bytes | bytearray)
            ):
                raise ValueError(f"vocab: entry {excerpt(i)}: {excerpt(t)} is not int -> bytes")
            out[i] = bytes(t)
    if len(out) - 1 != max(out) or min(out) != 0:
        raise ValueError(f"vocab: ids must be 0..{len(out) - 1} without gaps")
    return out


class PythonEncoder:
    """Merge-rank BPE of each pre-token in Python, with a bounded cache of pre-tokens."""

    def __init__(
        self, byte_ids: Sequence[int], merge_ids: Sequence[tuple[int, int, int]], pattern: str
    ):
        self.byte_ids = list(byte_ids)  # byte value -> id
        # (left id, right id) -> (rank, merged id); a later duplicate pair never applies
        self.ranks: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, (a, b, c) in enumerate(merge_ids):
            self.ranks.setdefault((a, b), (rank, c))
        self.pattern = regex.compile(pattern)
        self.cache: dict[str, list[int]] = {}

    def encode_piece(self, piece: bytes) -> list[int]:
        """BPE of one pre-token: merge the lowest-ranked adjacent pair until none applies."""
        ids = [self.byte_ids[b] for b in piece]
        ranks = self.ranks
        while len(ids) > 1:
            best = None
            for pair in zip(ids, ids[1:], strict=False):
                found = ranks.get(pair)
                if found is not None and (best is None or found[0] < best[0]):
                    best, (a, b) = found, pair
            if best is None:
                break
            merged, out, i = best[1], [], 0
            while i < len(ids):
                if ids[i] == a and i + 1 < len(ids) and ids[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        return ids

    def encode(self, text: str) -> list[int]:
        cache, out = self.cache, []
        for piece in self.pattern.findall(text):
            ids = cache.get(piece)
            if ids is None:
                ids = self.encode_piece(_utf8(piece))
                if len(cache) >= CACHE_SIZE:
                    cache.clear()
                cache[piece] = ids
            out += ids
        return out


CHECK_VERSION = 1
"""Of the check in `tiktoken_ranks`: a verdict found by another version is checked again."""


def tiktoken_verdict(digest: str, passed: bool) -> dict:
    """What `tiktoken_ranks` found for the tables of `digest`, as plain data: a tokenizer's
    state (checkpoints, meta.pkl) carries it, so that `Tokenizer(**state)` skips the check."""
    return {"digest": digest, "check": CHECK_VERSION, "tiktoken_ranks": passed}


def trusted_verdict(found: object, digest: str) -> bool | None:
    """`found`'s pass or fail if this check found it for the tables of `digest` (recomputed
    by the caller from the tables it loads, never taken from `found`); else None: check."""
    if not isinstance(found, dict) or found.get("check") != CHECK_VERSION:
        return None
    passed = found.get("tiktoken_ranks")
    return passed if type(passed) is bool and found.get("digest") == digest else None


def tiktoken_ranks(
    table: Sequence[bytes],
    merge_ids,
    byte_ids: Sequence[int],
    reference: Callable[[], PythonEncoder] | None,
) -> dict[bytes, int] | None:
    """tiktoken's mergeable ranks (token bytes -> id) giving merge-order BPE's ids, or
    None where no ranks can (ids not rising in merge order, a merged token that does not
    encode to itself). `merge_ids`: (left, right, merged id) rows. `reference` None skips
    the slow part of the check (a verdict vouches for it); else it gives the Python encoder,
    which the check needs."""
    rows = [tuple(r) for r in np.asarray(merge_ids, dtype=np.int64).reshape(-1, 3).tolist()]
    passed = _rising(table, rows, byte_ids) and (
        reference is None or merges_encode_to_themselves(table, rows, byte_ids, reference())
    )
    return (passed and rank_table(table, byte_ids, merge_ids)) or None


def rank_table(table: Sequence[bytes], byte_ids: Sequence[int], merge_ids) -> dict[bytes, int]:
    """Token bytes -> id of the bytes and merged tokens, in merge order (tiktoken's ranks)."""
    merged = np.asarray(merge_ids, dtype=np.int64).reshape(-1, 3)[:, 2].tolist()
    return {table[i]: i for i in [*byte_ids, *merged]}


def _rising(table: Sequence[bytes], merge_ids, byte_ids: Sequence[int]) -> bool:
    """Merged ids rise in merge order above every byte's, and no token comes twice."""
    seen, last = {table[i] for i in byte_ids}, max(byte_ids)
    for _, _, c in merge_ids:
        if c <= last or table[c] in seen:
            return False
        seen.add(table[c])
        last = c
    return True


def merges_encode_to_themselves(
    vocab: dict[int, bytes],
    merge_ids: Sequence[tuple[int, int, int]],
    byte_ids: Sequence[int],
    reference: PythonEncoder,
) -> bool:
    """Whether merge BPE of every merged token's bytes gives that token alone.

    Exact, without running BPE on most tokens. When both parts a, b of merge k were made
    by earlier merges, BPE of a+b applies merges in rising rank, each part as on its own
    (a and b encode to themselves: checked before), until merge k joins them, unless a
    merge crosses the a|b boundary first (a|b then never is a boundary again, so the
    result is not [a+b]). A crossing merge of rank r joins x, the last token of a's part
    at that moment, with y, the first of b's: x and y still unmerged at rank r. Only
    tokens with such a pair in their history run BPE.
    """
    partners: dict[int, dict[int, int]] = {}  # left id -> {right id: rank of their merge}
    as_left: dict[int, int] = {}  # id -> lowest rank of a merge with it on the left
    as_right: dict[int, int] = {}  # ... on the right
    for (x, y), (rank, _) in reference.ranks.items():  # in rising rank
        partners.setdefault(x, {})[y] = rank
        as_left.setdefault(x, rank)
        as_right.setdefault(y, rank)
    # Per token, the (id, rank that merged it away) of what in turn was the first of its
    # BPE, kept only where a crossing is possible; the token itself, not merged away
    # yet, last (OPEN). `last`: the same for the last of its BPE.
    first = {i: ((i, OPEN),) for i in byte_ids}
    last = dict(first)
    for k, (a, b, c) in enumerate(merge_ids):
        if a not in first or b not in first:  # a part made later: check the slow way
            return all(reference.encode_piece(vocab[c]) == [c] for _, _, c in merge_ids)
        starts = first[b]
        crossing = False
        for x, x_until in last[a]:
            row = partners.get(x)
            if row is not None:
                for y, y_until in starts:
                    r = row.get(y, k)
                    if r < k and r <= x_until and r <= y_until:
                        crossing = True
                        break
                if crossing:
                    break
        if crossing and reference.encode_piece(vocab[c]) != [c]:
            return False
        # a (b) was the first (last) of c's BPE until rank k: kept if it can cross by then
        head = first[a][:-1] + ((a, k),) if as_right.get(a, OPEN) <= k else first[a][:-1]
        tail = last[b][:-1] + ((b, k),) if as_left.get(b, OPEN) <= k else last[b][:-1]
        first[c], last[c] = (*head, (c, OPEN)), (*tail, (c, OPEN))
    return True
