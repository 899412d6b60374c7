"""Best-fit decreasing packing inside buffers of the epoch order (`data.pack_strategy=best_fit`).

The epoch order is cut into buffers of `data.pack_buffer` consecutive documents (with
`data.group_by`, a buffer never spans two groups, so a pack holds one group's documents and
groups stay adjacent). Inside each buffer, documents are packed into packs of at most
`pack_size` tokens, never cut; a document of `pack_size` tokens or more is a pack alone.
The result is a permutation of the epoch order (the documents of a pack made adjacent, in
their epoch order; packs ordered by their first document's epoch position) plus the pack
boundaries, so the plan's "a sequence is an interval of the stream" holds unchanged. It is
a function of the epoch order and the lengths only, hence of (seed, epoch).

The packing, all buffers at once, in vectorised rounds (no Python step per document):

1. **Open**: in each buffer, the k largest unplaced documents each open a pack, k = the
   lower bound on the packs the rest needs: max(#documents > pack_size/2, ceil(tokens /
   pack_size)), at least 1.
2. **Fill rounds**: the open packs of a buffer, by decreasing free space, each take the
   largest unplaced document that fits (a pack after the first takes the largest one the
   packs before it left: with sorted lengths that is one searchsorted plus a running
   minimum, `_take`). A pack that gets nothing is closed: nothing left fits it.
3. Repeat 1-2 until every document is placed.

Every round places a document in every open pack, so a buffer needs at most (documents
in its fullest pack) rounds per opening, and openings are few (each opens the lower bound
of what is left). A pack closes only when no remaining document of its buffer fits it, so
no document of a later opening would have fitted an earlier pack. Each buffer's last packs
are partly empty: a buffer should hold many packs' worth of tokens (`data.pack_buffer`).
Tighter than ordered packing in practice (bench/plan.py), not a proven bound for every
order. Memory: about 60 bytes per document of one chunk of buffers (CHUNK documents, or one
buffer if larger), then the new order (the epoch order's dtype) and 8 bytes per pack.
"""

from __future__ import annotations

import numpy as np

CHUNK = 1 << 20  # documents per vectorised pass (whole buffers): bounds the temporaries


def best_fit_packs(
    order: np.ndarray,
    lengths: np.ndarray,
    pack_size: int,
    buffer: int,
    doc_groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(new epoch order, int64 [n_packs+1] first document of each pack then n, int64
    [n_packs] pack lengths): the epoch order `order` packed best-fit inside buffers."""
    n = len(order)
    starts = buffer_starts(order, buffer, doc_groups)
    cuts = np.unique(np.r_[starts[np.searchsorted(starts, np.arange(0, n, CHUNK))], n])
    new_order, firsts, sizes = [order[:0]], [], []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        lens = lengths[order[lo:hi]]  # [c] epoch lengths of this chunk
        buf = np.searchsorted(starts, np.arange(lo, hi), side="right") - 1  # [c]
        perm, first = pack_chunk(lens, buf, pack_size)
        new_order.append(order[lo:hi][perm])
        firsts.append(lo + first)
        sizes.append(np.add.reduceat(lens[perm], first))
    seq_first = np.concatenate([np.zeros(0, np.int64), *firsts, [n]]).astype(np.int64)
    seq_len = np.concatenate([np.zeros(0, np.int64), *sizes]).astype(np.int64)
    return np.concatenate(new_order), seq_first, seq_len


def buffer_starts(order: np.ndarray, buffer: int, doc_groups: np.ndarray | None) -> np.ndarray:
    """int64 first epoch document of each buffer: every `buffer` documents, restarting at
    every change of group (with doc_groups)."""
    n = len(order)
    if doc_groups is None:
        return np.arange(0, n, buffer, dtype=np.int64)
    group = np.asarray(doc_groups)[order]  # [n]
    run_start = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if n else np.zeros(0, int)
    run_len = np.diff(np.r_[run_start, n])
    per_run = -(-run_len // buffer)  # buffers in each run
    k = np.arange(per_run.sum()) - np.repeat(np.cumsum(per_run) - per_run, per_run)
    return (np.repeat(run_start, per_run) + k * buffer).astype(np.int64)


def pack_chunk(lens: np.ndarray, buf: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(permutation of the chunk's documents, first position of each pack in it) for
    documents of lengths `lens` in buffers `buf` (non-decreasing), packs of `cap` tokens."""
    n = len(lens)
    pack = np.full(n, -1, dtype=np.int64)  # [c] pack of each document
    alone = np.flatnonzero(lens >= cap)
    pack[alone] = np.arange(len(alone))
    n_packs = len(alone)
    items = np.flatnonzero(lens < cap)
    # by buffer, then length, then epoch position backwards: the last of a buffer's equal
    # lengths (the one taken first) is the earliest in the epoch order
    items = items[np.lexsort((-items, lens[items], buf[items]))]
    while len(items):
        seeds = _seeds(lens[items], buf[items], cap)  # step 1
        ids = n_packs + np.arange(len(seeds))
        n_packs += len(seeds)
        pack[items[seeds]] = ids
        free, pack_buf = cap - lens[items[seeds]], buf[items[seeds]]
        items = np.delete(items, seeds)
        key = buf[items] * (cap + 1) + lens[items]  # [m] sorted: buffer, then length
        while len(ids) and len(items):  # step 2
            by = np.lexsort((-free, pack_buf))  # buffer, then free space decreasing
            ids, free, pack_buf = ids[by], free[by], pack_buf[by]
            taken = _take(key, pack_buf, free, cap)
            ok = taken >= 0
            pack[items[taken[ok]]] = ids[ok]
            ids, pack_buf = ids[ok], pack_buf[ok]
            free = free[ok] - lens[items[taken[ok]]]
            items, key = np.delete(items, taken[ok]), np.delete(key, taken[ok])
    first = np.full(n_packs, n, dtype=np.int64)
    np.minimum.at(first, pack, np.arange(n))  # each pack's first epoch position
    perm = np.argsort(first[pack], kind="stable")  # packs adjacent, epoch order inside
    key = first[pack][perm]
    return perm, np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if n else np.zeros(0, int)


def _seeds(lens: np.ndarray, buf: np.ndarray, cap: int) -> np.ndarray:
    """Indices of the documents (sorted by buffer then length) that open packs: the k
    largest of each buffer, k = max(#longer than cap/2, ceil(tokens / cap)), >= 1."""
    start = np.flatnonzero(np.r_[True, buf[1:] != buf[:-1]])  # [b] buffer starts
    count = np.diff(np.r_[start, len(lens)])
    tokens = np.add.reduceat(lens, start)
    halves = np.add.reduceat((2 * lens > cap).astype(np.int64), start)
    k = np.clip(np.maximum(halves, -(-tokens // cap)), 1, count)  # [b]
    end = np.repeat(start + count, count)  # [m] end of each document's buffer
    return np.flatnonzero(end - np.arange(len(lens)) <= np.repeat(k, count))


def _take(item_key: np.ndarray, pack_buf: np.ndarray, free: np.ndarray, cap: int) -> np.ndarray:
    """For packs sorted by (buffer, free space decreasing): the item each one takes, -1 for none.

    item_key = buffer * (cap+1) + length, sorted. Pack k of a buffer may take items up to
    fit_k (the last that fits it; non-increasing along the buffer's packs); the packs before
    it took distinct items, so it takes taken_k = min(fit_k, taken_{k-1} - 1) =
    min_{j<=k} (fit_j + j) - k, a running minimum restarted at each buffer (the offset
    `- big * buffer index` makes every buffer's values smaller than all earlier ones).
    """
    fit = np.searchsorted(item_key, pack_buf * (cap + 1) + free, side="right") - 1  # [p]
    lowest = np.searchsorted(item_key, pack_buf * (cap + 1), side="left")  # buffer's first
    new = np.r_[True, pack_buf[1:] != pack_buf[:-1]]
    segment = np.cumsum(new) - 1  # [p] buffer index among the packs' buffers
    rank = np.arange(len(fit)) - np.flatnonzero(new)[segment]  # [p] rank inside the buffer
    big = len(item_key) + len(fit) + 2
    taken = np.minimum.accumulate(fit + rank - big * segment) + big * segment - rank
    return np.where(taken >= lowest, taken, -1)
