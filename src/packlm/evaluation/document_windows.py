"""Every document scored on its own context, wherever the run's packing put it
(`python -m packlm.evaluate per_document=true`).

A document of L tokens (its EOS included; with data.bos its BOS too) has L-1 targets, each
predicted from the document's tokens before it and nothing else. With window T:

- L <= T+1: the document is one piece, read whole. Pieces are packed best-fit
  (`packing.best_fit`, inside buffers of data.pack_buffer documents) into rows of T+1 tokens;
  the block-diagonal mask and the per-document positions make each piece's logits those of
  the document alone (DESIGN.md invariant 1).
- L > T+1: rolling windows of T+1 tokens, one per row. The first reads tokens 0..T and
  scores its T targets; each next one ends `stride` targets later (the last at the
  document's end), reads the T+1 tokens up to its end and scores only the targets no
  earlier window scored. Every target is scored once, with at least T-stride+1 tokens of
  context (T for the first T targets): Hugging Face's perplexity-with-a-stride recipe, the
  last window aligned to the end as lm-evaluation-harness's `loglikelihood_rolling` does.

A row is read by the training loader's `WindowDataset` and labelled by `packlm.batch`'s rule
in `document` packing (a conversation's chat mask included: the dataset's
data.chat_supervised), so the batch is a validation batch (with `document_ids`) whose labels
before a rolling window's first new target are IGNORE_INDEX.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from packlm.batch import IGNORE_INDEX, make_batch
from packlm.data.epoch.collate import to_tensors
from packlm.data.epoch.loader import WindowDataset
from packlm.data.epoch.packing.best_fit import best_fit_packs
from packlm.data.epoch.sampler import BatchPieces


@dataclass(frozen=True)
class DocumentRows:
    """The rows of a per-document pass: pieces int64 [4, p] (row, store document, first
    token in the document, tokens read), rows in order; skip int64 [rows]: the leading
    labels of each row already scored by an earlier window (0 for whole documents)."""

    pieces: np.ndarray
    skip: np.ndarray

    @property
    def n_rows(self) -> int:
        return len(self.skip)


def document_rows(lengths: np.ndarray, window: int, stride: int, buffer: int) -> DocumentRows:
    """The rows above for documents of `lengths` tokens (int [n], as the plan counts them),
    window T, `stride` (1..T) between rolling windows' ends, best-fit `buffer` documents."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if not 1 <= stride <= window:
        raise ValueError(f"stride {stride}: must be in 1..{window} (the window)")
    t1 = window + 1
    short = np.flatnonzero(lengths <= t1)
    order, first, _ = best_fit_packs(short, lengths, t1, max(buffer, 1))
    n_packs = len(first) - 1
    whole_row = np.repeat(np.arange(n_packs), np.diff(first))  # [s] the pack of each document
    long = np.flatnonzero(lengths > t1)
    ends = window_ends(lengths[long], window, stride)  # [w] last token of each window
    counts = np.bincount(ends[1], minlength=len(long)) if len(long) else np.zeros(0, np.int64)
    doc = np.repeat(long, counts)  # [w]
    end = ends[0]
    previous = np.r_[-1, end[:-1]]  # [w] the window before's end (same document, or none)
    first_window = np.r_[True, doc[1:] != doc[:-1]] if len(doc) else np.zeros(0, bool)
    skip = np.where(first_window, 0, previous - (end - window))  # targets before the new ones
    pieces = np.stack(
        [
            np.r_[whole_row, n_packs + np.arange(len(doc))],
            np.r_[order, doc],
            np.r_[np.zeros(len(order), np.int64), end - window],
            np.r_[lengths[order], np.full(len(doc), t1, np.int64)],
        ]
    ).astype(np.int64)
    return DocumentRows(pieces, np.r_[np.zeros(n_packs, np.int64), skip].astype(np.int64))


def window_ends(lengths: np.ndarray, window: int, stride: int) -> np.ndarray:
    """int64 [2, w]: (last token position, index into `lengths`) of every rolling window of
    documents longer than window+1 tokens: T, T+stride, ... capped at (and ending with) L-1."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = 1 + -(-(lengths - 1 - window) // stride)  # [d] windows per document
    which = np.repeat(np.arange(len(lengths)), n)
    k = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)  # [w] index inside its document
    end = np.minimum(window + k * stride, lengths[which] - 1)
    return np.stack([end, which]).astype(np.int64)


class DocumentBatches:
    """Batches of `packlm.batch` (with `document_ids`) over DocumentRows, `batch_size` rows
    each, read from the store by `WindowDataset` in this process."""

    def __init__(self, dataset: WindowDataset, rows: DocumentRows, batch_size: int):
        self.dataset, self.rows, self.batch_size = dataset, rows, batch_size

    def __len__(self) -> int:
        return -(-self.rows.n_rows // self.batch_size)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        pieces, skip = self.rows.pieces, self.rows.skip
        bounds = np.searchsorted(pieces[0], np.arange(0, self.rows.n_rows, self.batch_size))
        bounds = np.r_[bounds, pieces.shape[1]]
        for i in range(len(self)):
            lo, hi = bounds[i], bounds[i + 1]
            batch = pieces[:, lo:hi].copy()
            batch[0] -= i * self.batch_size  # rows of this batch from 0
            rows = min(self.batch_size, self.rows.n_rows - i * self.batch_size)
            samples = self.dataset[BatchPieces(rows, batch)]
            arrays = make_batch(
                samples.tokens, samples.segments, "document", documents=samples.documents,
                supervised=samples.supervised,  # the chat mask (data.chat_supervised)
            )  # fmt: skip
            row_skip = skip[i * self.batch_size : i * self.batch_size + rows]  # [B]
            column = np.arange(arrays["labels"].shape[1])  # [T]
            arrays["labels"][column[None, :] < row_skip[:, None]] = IGNORE_INDEX
            yield to_tensors(arrays)
