"""The batch contract, written down once: what every packlm batch holds and the rules that
make it (numpy only, so DataLoader workers build it and planning never imports torch).

A worker reads, for each of the B rows, T+1 consecutive tokens and the document index of
each token inside its row (`segments`, -1 on PAD); everything below derives from those two
arrays:

| key | dtype, shape | meaning |
| --- | --- | --- |
| `input_ids` | int64 [B, T] | tokens[:, :T]; PAD where no token |
| `labels` | int64 [B, T] | the next token, or -100 (`IGNORE_INDEX`) where it is PAD, in another document (packing `document`/`none`), past the end, where the input or the target is a token of a `data.skip_documents` document, or where the target is a conversation token that is not supervised (`supervised`: the chat roles that train, data.chat_supervised) |
| `segment_ids` | int32 [B, T] | document index inside the row, 0, 1, 2...; -1 on PAD; all 0 in `stream` packing |
| `position_ids` | int64 [B, T] | 0 at the row start and at every document start (`document`/`none`), +1 per token; 0..T-1 per row in `stream`; 0 on PAD |
| `cu_seqlens` | int32 [S+1] | only with `varlen`: starts of the S runs of equal segment id over the flattened B*T tokens (a run never spans two rows; a row's PAD tail is one run), then B*T |
| `max_seqlen` | int64 [] | only with `varlen`: the longest run |
| `source_ids` | int16 [B, T] (int32 past 32767 sources) | the store source (`manifest["sources"]` index) of each input token's document; -1 on PAD. Supervised tokens per source = `bincount(source_ids[labels != IGNORE_INDEX])`, which sums to supervised exactly (in `stream` packing a target across documents counts for its input token's source) |
| `document_ids` | int32 [B, T] (int64 past 2^31-1 documents) | validation batches only: the store document of each input token; -1 on PAD. A target belongs to its input token's document, as for `source_ids` (per-document losses: `packlm.evaluation.document_losses`) |

`cu_seqlens` / `max_seqlen` are what varlen attention kernels take (flash-attn's
`flash_attn_varlen_func`; Hugging Face's flash-attention path as `cu_seq_lens_q/k` and
`max_length_q/k`). A model that takes only `position_ids` (Hugging Face's SDPA and eager
attention detect packed rows from them) isolates the same documents: a position that does
not follow its predecessor by +1 starts a new one, and every PAD (position 0) is alone.

Labels are already shifted: `labels[:, j]` is the target of `input_ids[:, j]`. Pass them to a
loss as they are, never to a Hugging Face model's own `labels=` (it shifts them again).
Counts from the batch alone: supervised = `(labels != IGNORE_INDEX).sum()`, non-pad =
`(segment_ids >= 0).sum()`. `with_counts` adds all of them (`COUNTED`) under `counts` while
the batch is still on the CPU (Lightning's `on_before_batch_transfer`), so a training step on
an accelerator never reads them back from the device.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

IGNORE_INDEX = -100
"""The label of a position that is not a target (PyTorch's cross-entropy default)."""

KEYS = ("input_ids", "labels", "segment_ids", "position_ids")
SOURCE_KEY = "source_ids"
"""Added by packlm's loader (`WindowDataset` knows each document's source)."""
DOCUMENT_KEY = "document_ids"
"""Added by packlm's validation loader (`WindowDataset(documents=True)`)."""
VARLEN_KEYS = ("cu_seqlens", "max_seqlen")
COUNTS_KEY = "counts"
"""float64 [len(COUNTED)] numpy, added on the CPU by `with_counts` (never moved to a device)."""
COUNTED = (
    "supervised", "input", "nonpad", "documents", "target_documents", "attention_pairs",
    "dense_pairs",
)  # fmt: skip
"""What `counts` holds, named as `packlm.model.loss.StepTotals` names them."""


def make_batch(
    tokens: np.ndarray,
    segments: np.ndarray,
    packing: str,
    varlen: bool = False,
    sources: np.ndarray | None = None,
    skipped: np.ndarray | None = None,
    documents: np.ndarray | None = None,
    supervised: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """tokens int64 [B, T+1] (PAD where none), segments int32 [B, T+1] (-1 where PAD),
    sources int16/int32 [B, T+1] (-1 where PAD; None: no `source_ids`), skipped bool [B, T+1]
    (tokens of data.skip_documents; None: none), documents int32/int64 [B, T+1] (-1 where PAD;
    None: no `document_ids`), supervised bool [B, T+1] (may this token be a target: False on a
    conversation's context tokens; None: every token) -> the batch above; in `stream` packing
    a row is one segment (targets cross documents)."""
    seg = np.where(segments >= 0, 0, -1).astype(np.int32) if packing == "stream" else segments
    seg_in = np.ascontiguousarray(seg[:, :-1], dtype=np.int32)
    batch = {
        "input_ids": np.ascontiguousarray(tokens[:, :-1]),
        "labels": drop_unsupervised(drop_skipped(labels(tokens, seg), skipped), supervised),
        "segment_ids": seg_in,
        "position_ids": positions(seg_in),
    }
    if sources is not None:
        batch[SOURCE_KEY] = np.ascontiguousarray(sources[:, :-1])
    if documents is not None:
        batch[DOCUMENT_KEY] = np.ascontiguousarray(documents[:, :-1])
    if varlen:
        batch["cu_seqlens"], batch["max_seqlen"] = varlen_runs(seg_in)
    return batch


def labels(tokens: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """The label rule: int64 [B, T], the next token where it is real and in the same segment,
    else IGNORE_INDEX. tokens, segments: [B, T+1]."""
    seg_in, seg_next = segments[:, :-1], segments[:, 1:]
    target = (seg_next == seg_in) & (seg_next >= 0)
    return np.where(target, tokens[:, 1:], IGNORE_INDEX).astype(np.int64)


def drop_skipped(lab: np.ndarray, skipped: np.ndarray | None) -> np.ndarray:
    """labels int64 [B, T] with IGNORE_INDEX wherever the input or the target token is one of
    a skipped document (skipped: bool [B, T+1]; None: labels unchanged). In place."""
    if skipped is not None:
        lab[skipped[:, :-1] | skipped[:, 1:]] = IGNORE_INDEX
    return lab


def drop_unsupervised(lab: np.ndarray, supervised: np.ndarray | None) -> np.ndarray:
    """labels int64 [B, T] with IGNORE_INDEX wherever the target token may not be one
    (supervised: bool [B, T+1]; None: labels unchanged): labels[t] stays only if mask[t+1].
    In place."""
    if supervised is not None:
        lab[~supervised[:, 1:]] = IGNORE_INDEX
    return lab


def piece_targets(
    row: np.ndarray, length: np.ndarray, rows: int, packing: str,
    allowed: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:  # fmt: skip
    """int64 [rows]: the targets `labels` gives each row, from its document pieces alone
    (row index and tokens read of each piece, rows in order; `targets_of_pieces`)."""
    per_piece = targets_of_pieces(row, length, packing, allowed)  # [p]
    return np.bincount(row, weights=per_piece, minlength=rows).astype(np.int64)


def targets_of_pieces(
    row: np.ndarray, length: np.ndarray, packing: str,
    allowed: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:  # fmt: skip
    """int64 [p]: the targets `labels` gives each document piece (row index and tokens read
    of each piece, rows in order), without reading a token: a piece is one segment, so its
    first token is never a target; in `stream` packing a row is one segment, so only the
    row's first token is not. `allowed` (a conversation store's,
    `packlm.data.epoch.chat_mask.ChatMask.allowed`): (int64 [p] tokens of each piece that
    may be a target, bool [p] may its first token be one), as `drop_unsupervised` keeps
    them; None: every token may (a piece of n tokens has n-1 targets, a stream row R-1)."""
    if allowed is None:
        count, lead = length, np.ones(len(row), dtype=bool)
    else:
        count, lead = allowed
    if packing == "stream":  # only a row's first piece starts a segment
        lead = lead & np.r_[True, row[1:] != row[:-1]] if len(row) else lead
    return np.asarray(count, dtype=np.int64) - lead


def positions(segments: np.ndarray) -> np.ndarray:
    """int64 [B, T]: 0 where a segment starts (and at the row start), +1 per token; 0 on PAD."""
    _, t = segments.shape
    col = np.arange(t)
    run_start = np.maximum.accumulate(np.where(_starts(segments), col, 0), axis=1)  # [B, T]
    return np.where(segments >= 0, col - run_start, 0).astype(np.int64)


def varlen_runs(segments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cu_seqlens int32 [S+1], max_seqlen int64 []) of [B, T] segment ids: the runs of equal
    id over the flattened rows, a new run at every row start."""
    starts = np.flatnonzero(_starts(segments))  # row-major: flattened positions
    cu = np.append(starts, segments.size).astype(np.int32)
    return cu, np.asarray(np.diff(cu).max(initial=0), dtype=np.int64)


def supervised_by_source(batch_labels: np.ndarray, source_ids: np.ndarray, n: int) -> np.ndarray:
    """int64 [n]: the supervised targets of each source in a batch (sums to supervised)."""
    return np.bincount(source_ids[batch_labels != IGNORE_INDEX], minlength=n).astype(np.int64)


def counts(labels: np.ndarray, segment_ids: np.ndarray | None) -> np.ndarray:
    """float64 [len(COUNTED)] of one batch: targets (!= IGNORE_INDEX); positions B T; non-PAD
    positions; (row, segment) pieces; pieces with a target (document weighting's P); causal
    (query, key) pairs the block-diagonal mask allows (n (n+1) / 2 a piece of n tokens) and a
    dense causal mask's (B T (T+1) / 2). Without segment ids a row is one piece, no PAD."""
    B, T = labels.shape
    supervised = labels != IGNORE_INDEX  # [B, T]
    dense = B * T * (T + 1) / 2
    if segment_ids is None:
        pieces, with_target, allowed = B, supervised.any(axis=1).sum(), dense
        nonpad = B * T
    else:
        seg = segment_ids.astype(np.int64)
        slot = (np.where(seg >= 0, seg, T) + (T + 1) * np.arange(B)[:, None]).ravel()  # PAD -> T
        size = np.bincount(slot, minlength=B * (T + 1)).reshape(B, T + 1)[:, :T]  # [B, T]
        targets = np.bincount(slot, weights=supervised.ravel(), minlength=B * (T + 1))
        pieces, nonpad = (size > 0).sum(), (seg >= 0).sum()
        with_target = (targets.reshape(B, T + 1)[:, :T] > 0).sum()
        allowed = (size * (size + 1) // 2).sum()
    values = [supervised.sum(), B * T, nonpad, pieces, with_target, allowed, dense]
    return np.array(values, dtype=np.float64)


def with_counts(batch):
    """`batch` (a mapping of CPU tensors or arrays with `labels`) with its `counts` added;
    anything else, or a batch already on an accelerator, unchanged (the loss then counts on
    the device and reads the step's totals back once)."""
    if not isinstance(batch, Mapping) or "labels" not in batch:
        return batch
    labels, seg = batch["labels"], batch.get("segment_ids")
    if any(getattr(getattr(t, "device", None), "type", "cpu") != "cpu" for t in (labels, seg)):
        return batch
    host = [None if t is None else np.asarray(t) for t in (labels, seg)]  # CPU tensors: views
    return {**batch, COUNTS_KEY: counts(*host)}


def _starts(segments: np.ndarray) -> np.ndarray:
    """bool [B, T]: where a run of equal segment id starts (every row start included)."""
    starts = np.ones(segments.shape, dtype=bool)
    starts[:, 1:] = segments[:, 1:] != segments[:, :-1]
    return starts
