"""Encode ordinary text (no special tokens) to ids: pre-tokenize, then apply the merges
to each pre-token in rank order.

Two engines give the same ids: `PythonEncoder` (always there, the reference) and
tiktoken's Rust core when it is installed and provably equivalent for the vocabulary
(`tiktoken_encoder` says when). tiktoken ranks a pair by the rank of the token it
would form and returns a pre-token that is itself a token at once; that equals merge
order BPE when every merged token encodes to itself and merge ids rise in merge order.
"""

from __future__ import annotations

from collections.abc import Sequence

import regex

CACHE_SIZE = 1 << 14  # pre-tokens remembered by the Python engine (bounded memory)


def _utf8(piece: str) -> bytes:
    """UTF-8 bytes; a lone surrogate becomes U+FFFD, as tiktoken does."""
    try:
        return piece.encode("utf-8")
    except UnicodeEncodeError:
        return piece.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


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


def tiktoken_encoder(
    vocab: dict[int, bytes],
    merge_ids: Sequence[tuple[int, int, int]],
    byte_ids: Sequence[int],
    pattern: str,
    reference: PythonEncoder,
    name: str,
):
    """tiktoken's `encode_ordinary` for this vocabulary, or None where it would differ
    from merge-order BPE (or tiktoken is absent, or cannot compile the pattern)."""
    try:
        import tiktoken
    except ImportError:
        return None
    ranks = {vocab[i]: i for i in byte_ids}
    last = max(byte_ids)
    for _, _, c in merge_ids:
        token = vocab[c]
        if c <= last or token in ranks:  # ids must rise in merge order; no duplicates
            return None
        ranks[token] = last = c
    # a pre-token that is a token comes back whole from tiktoken: merge BPE must agree
    if any(reference.encode_piece(t) != [i] for t, i in ranks.items() if len(t) > 1):
        return None
    try:
        encoding = tiktoken.Encoding(
            name, pat_str=pattern, mergeable_ranks=ranks, special_tokens={}
        )
    except Exception:  # fancy-regex rejects the pattern
        return None
    return encoding.encode_ordinary
