"""The epoch plan: (document lengths, data config, seed, epoch) -> every sample of the epoch.

A pure function, so every rank and worker computes the same plan and a restart rebuilds it
instead of storing it. Coordinates: the epoch's documents (after mixing and shuffling) laid
end to end form the *stream*; a sequence is an interval of the stream (one document, a pack,
or the whole stream) and a sample is (stream start g, tokens read R <= T+1) inside one
sequence. Samples are never materialized as objects: sample i of sequence s is computed from
s's start, length and offset, so memory is a few bytes per document and per sequence plus
one int32 permutation of the samples.

The document order (mixing weights, grouping, shuffling) is `packlm.data.epoch.order`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packlm.config.data import DataConfig
from packlm.data.epoch.chat_mask import ChatMask
from packlm.data.epoch.indexing import index_dtype, interval_of
from packlm.data.epoch.order import OFFSETS, SAMPLES, epoch_documents, plan_rng
from packlm.data.epoch.packing import make_sequences, reorder_for_packing
from packlm.data.epoch.snap import ParagraphIndex, snapped_starts
from packlm.data.epoch.windows import place_windows, sequence_windows, window_start
from packlm.errors import ConfigError

GROUP = 32
"""Stream positions are stored for every GROUP-th epoch document (8/GROUP bytes a document)."""
_CHUNK = GROUP * 32768


@dataclass
class EpochPlan:
    """One epoch's samples, stored per document and per sequence (see the module doc)."""

    window: int
    stride: int
    tail: str
    packing: str
    snap_tolerance: int | None  # data.snap document/paragraph: how far a start may move forward
    seed: int
    epoch: int
    # int64 [n_docs]: the store's document lengths (shared, not owned)
    doc_lengths: np.ndarray
    # int32 [n_ord]: the store document of each epoch document
    order: np.ndarray
    # int64 [ceil(n_ord/GROUP)+1]: stream start of epoch documents 0, G, 2G, ..., then the total
    anchors: np.ndarray
    # int64 [n_seq+1]: first epoch document of each sequence, then n_ord; None: one per document
    seq_first: np.ndarray | None
    # int32 [n_seq]: first window start of each sequence; None: all 0
    offsets: np.ndarray | None
    # int64 [n_seq+1]: samples before each sequence
    window_cum: np.ndarray
    # int32 [S]: the sample at each position of the epoch; None: in plan order
    sample_order: np.ndarray | None
    snap: str = "none"  # data.snap
    # the store's paragraph starts (data.snap=paragraph, or given for the statistics); None: unknown
    paragraphs: ParagraphIndex | None = None
    # a conversation store's role mask under data.chat_supervised (set by EpochPlans for the
    # curriculum's and the statistics' counts, `packlm.data.epoch.chat_mask`); None: every
    # token may be a target
    chat_mask: ChatMask | None = None

    @property
    def n_samples(self) -> int:
        return int(self.window_cum[-1])

    @property
    def n_sequences(self) -> int:
        return len(self.window_cum) - 1

    @property
    def n_documents(self) -> int:
        return len(self.order)

    @property
    def n_tokens(self) -> int:
        """Tokens of the epoch stream (every document copy counted)."""
        return int(self.anchors[-1])

    def doc_start(self, j: np.ndarray) -> np.ndarray:
        """int64 stream start of epoch documents j (j = n_ord gives the total)."""
        j = np.asarray(j, dtype=np.int64)
        group = j // GROUP
        # [n, G-1]: the epoch documents of j's group, masked to those before j
        k = group[:, None] * GROUP + np.arange(GROUP - 1)
        lens = self._lengths(k) * (k < j[:, None])
        return self.anchors[group] + lens.sum(axis=1)

    def locate(self, g: np.ndarray) -> np.ndarray:
        """int64 epoch document holding stream position g (0 <= g < n_tokens)."""
        g = np.asarray(g, dtype=np.int64)
        group = interval_of(self.anchors, g)
        k = group[:, None] * GROUP + np.arange(GROUP)  # [n, G]
        ends = self.anchors[group][:, None] + np.cumsum(self._lengths(k), axis=1)  # [n, G]
        return group * GROUP + (ends <= g[:, None]).sum(axis=1)

    def _lengths(self, k: np.ndarray) -> np.ndarray:
        """Lengths of epoch documents k, 0 past the end."""
        n = len(self.order)
        if n == 0:
            return np.zeros(k.shape, dtype=np.int64)
        return np.where(k < n, self.doc_lengths[self.order[np.minimum(k, n - 1)]], 0)

    def sequences(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(stream start, length) of sequences s, int64."""
        s = np.asarray(s, dtype=np.int64)
        if self.seq_first is None:
            return self.doc_start(s), self._lengths(s)
        start = self.doc_start(self.seq_first[s])
        return start, self.doc_start(self.seq_first[s + 1]) - start

    def sample_ids(self, positions: np.ndarray) -> np.ndarray:
        """The sample at each position of the epoch order."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.sample_order is None:
            return positions
        return self.sample_order[positions].astype(np.int64)

    def layout(self, s: np.ndarray) -> tuple[np.ndarray, ...]:
        """(stream start, length, offset, full windows) of sequences s, int64 [n] each."""
        start, length, offset, windows = self._sequence_windows(s)
        return start, length, offset, windows.full

    def windows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sequence, stream start g, tokens read R) of samples ids, int64 [n] each."""
        ids = np.asarray(ids, dtype=np.int64)
        s = interval_of(self.window_cum, ids)
        start, length, offset, windows = self._sequence_windows(s)
        k = ids - self.window_cum[s]  # window index inside its sequence
        local, read = window_start(k, length, offset, windows, self.window, self.stride, self.tail)
        g = start + local
        if self.snap_tolerance is not None and len(g):
            moved = k > 0  # a sequence's first window keeps its (random) offset
            if self.tail == "cover":
                moved &= k < windows.full  # the cover window stays aligned to the end
            g = np.where(moved, snapped_starts(self, g, start + length), g)
            read = np.minimum(self.window + 1, start + length - g)
        return s, g, read

    def _sequence_windows(self, s: np.ndarray) -> tuple[np.ndarray, ...]:
        """(stream start, length, offset, SequenceWindows) of sequences s."""
        s = np.asarray(s, dtype=np.int64)
        start, length = self.sequences(s)
        offset = np.zeros_like(s) if self.offsets is None else self.offsets[s].astype(np.int64)
        windows = sequence_windows(length, offset, self.window, self.stride, self.tail)
        return start, length, offset, windows

    def pieces(self, ids: np.ndarray) -> tuple[np.ndarray, ...]:
        """The document pieces of samples ids, in row order: (row, store doc, start in doc, length).

        A sample spans consecutive epoch documents; each piece is one document's part of it.
        """
        _, g, r = self.windows(ids)
        first, last = self.locate(g), self.locate(g + r - 1)  # [n]
        count = last - first + 1
        row = np.repeat(np.arange(len(g)), count)  # [p]
        within = np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count)
        j = first[row] + within  # [p] epoch documents
        doc_start = self.doc_start(j)
        doc = self.order[j].astype(np.int64)
        lo = np.maximum(doc_start, g[row])
        hi = np.minimum(doc_start + self.doc_lengths[doc], (g + r)[row])
        keep = hi > lo  # drops empty documents
        return row[keep], doc[keep], (lo - doc_start)[keep], (hi - lo)[keep]


def build_plan(
    doc_lengths: np.ndarray,
    cfg: DataConfig,
    epoch: int,
    doc_sources: np.ndarray | None = None,
    weights: list[float] | None = None,
    doc_groups: np.ndarray | None = None,
    paragraph_starts: np.ndarray | None = None,
) -> EpochPlan:
    """The plan of `epoch`: document order -> packs -> offsets -> windows -> sample order.

    `doc_groups` (int [n_docs], with data.group_by): documents of a group stay adjacent (with
    best_fit packing a pack holds one group's documents). `paragraph_starts` (the store's,
    `TokenStore.paragraph_starts`; needed by data.snap=paragraph): sorted store positions.
    """
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    if cfg.snap == "paragraph" and paragraph_starts is None:
        raise ConfigError(
            "data.snap=paragraph: the plan needs the store's paragraph starts "
            "(build_plan(..., paragraph_starts=store.paragraph_starts(tokenizer)))"
        )
    order = epoch_documents(len(lengths), cfg, epoch, doc_sources, weights, doc_groups)
    order, seq_first, seq_len = reorder_for_packing(order, lengths, cfg, doc_groups)
    anchors = stream_anchors(order, lengths)
    if seq_first is None:
        seq_first, seq_len = make_sequences(order, lengths, anchors, cfg)
    if seq_len is None:  # one sequence per document: lengths in chunks, no full temporary
        n_seq = len(order)
        chunks = (lengths[order[lo : lo + _CHUNK]] for lo in range(0, n_seq, _CHUNK))
    else:
        n_seq = len(seq_len)
        chunks = (seq_len[lo : lo + _CHUNK] for lo in range(0, n_seq, _CHUNK))
    offsets, window_cum = place_windows(chunks, n_seq, cfg, plan_rng(cfg.seed, epoch, OFFSETS))
    sample_order = None
    if cfg.shuffle:
        n = int(window_cum[-1])
        sample_order = np.arange(n, dtype=index_dtype(n))
        plan_rng(cfg.seed, epoch, SAMPLES).shuffle(sample_order)
    return EpochPlan(
        window=cfg.window,
        stride=cfg.stride,
        tail=cfg.tail,
        packing=cfg.packing,
        snap_tolerance=cfg.snap_tolerance if cfg.snap != "none" else None,
        seed=cfg.seed,
        epoch=epoch,
        doc_lengths=lengths,
        order=order,
        anchors=anchors,
        seq_first=seq_first,
        offsets=offsets,
        window_cum=window_cum,
        sample_order=sample_order,
        snap=cfg.snap,
        paragraphs=None
        if paragraph_starts is None
        else ParagraphIndex.of(paragraph_starts, lengths, cfg.bos),
    )


def stream_anchors(order: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int64 [ceil(n/GROUP)+1]: stream start of every GROUP-th epoch document, then the total.

    Computed in chunks so the temporary is bounded whatever the number of documents.
    """
    sums = []
    for lo in range(0, len(order), _CHUNK):
        lens = lengths[order[lo : lo + _CHUNK]]  # [chunk]
        sums.append(np.add.reduceat(lens, np.arange(0, len(lens), GROUP)))
    anchors = np.zeros(len(order) // GROUP + (len(order) % GROUP > 0) + 1, dtype=np.int64)
    if sums:
        np.cumsum(np.concatenate(sums), out=anchors[1:])
    return anchors
