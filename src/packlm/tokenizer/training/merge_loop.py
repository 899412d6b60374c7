"""The BPE merge loop in pure Python: the fallback when the C extension `_bpe` is absent,
and the readable statement of the algorithm `_bpe.c` implements step for step.

Input: distinct pre-tokens (bytes) with their counts. Token ids 0..255 are the bytes,
256 + k is the token made by merge k. Each step merges the most frequent adjacent pair;
ties go to the pair whose (bytes(left), bytes(right)) is lexicographically greatest.

Instead of recounting every pair at every step, pair counts are kept incrementally:
merging (a, b) -> c touches only the words that contain (a, b) (found through a
pair -> words index), and the best pair comes from a max-heap whose entries are
validated lazily (an entry whose count is out of date is re-pushed or dropped).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Sequence


def _order_key(left: bytes, right: bytes) -> tuple[int, ...]:
    """A tuple that sorts ascending when (left, right) sorts descending.

    Negated bytes with a terminator 1 (> every negated byte) so a prefix sorts after
    its extensions, exactly reversing Python's bytes order.
    """
    return (*(-x for x in left), 1, *(-x for x in right), 1)


def learn_merges(
    words: Sequence[bytes],
    counts: Sequence[int],
    num_merges: int,
    progress: Callable[[int], object] | None = None,
) -> list[tuple[int, int]]:
    """Up to `num_merges` merges as (left id, right id); fewer when no pair is left."""
    token_bytes = [bytes([i]) for i in range(256)]
    seqs = [list(w) for w in words]
    pair_counts: dict[tuple[int, int], int] = defaultdict(int)
    pair_words: dict[tuple[int, int], set[int]] = defaultdict(set)
    for w, (seq, n) in enumerate(zip(seqs, counts, strict=True)):
        for pair in zip(seq, seq[1:], strict=False):
            pair_counts[pair] += n
            pair_words[pair].add(w)

    def entry(pair: tuple[int, int]) -> tuple:
        return (-pair_counts[pair], _order_key(token_bytes[pair[0]], token_bytes[pair[1]]), pair)

    increased: set[tuple[int, int]] = set()  # pairs whose count rose in this merge

    def add(pair: tuple[int, int], delta: int, w: int) -> None:
        pair_counts[pair] += delta
        if delta > 0:
            pair_words[pair].add(w)
            increased.add(pair)

    heap = [entry(p) for p, n in pair_counts.items() if n > 0]
    heapq.heapify(heap)
    merges: list[tuple[int, int]] = []
    while len(merges) < num_merges:
        best = None
        while heap:
            neg, _, pair = heapq.heappop(heap)
            current = pair_counts.get(pair, 0)
            if current == -neg:
                best = pair
                break
            if 0 < current < -neg:  # count fell since this entry was pushed
                heapq.heappush(heap, entry(pair))
        if best is None:
            break
        a, b = best
        c = len(token_bytes)
        token_bytes.append(token_bytes[a] + token_bytes[b])
        merges.append(best)

        increased.clear()
        for w in pair_words.pop(best):
            seq, n = seqs[w], counts[w]
            out: list[int] = []
            i = 0
            while i < len(seq):
                if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                    if out:
                        add((out[-1], a), -n, w)
                        add((out[-1], c), n, w)
                    if i + 2 < len(seq):
                        add((b, seq[i + 2]), -n, w)
                        add((c, seq[i + 2]), n, w)
                    out.append(c)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            seqs[w] = out
        pair_counts.pop(best, None)
        for pair in increased:
            if pair_counts[pair] > 0:
                heapq.heappush(heap, entry(pair))
        if progress is not None:
            progress(1)
    return merges
