"""One split of a build: what it accumulates, the checks at its end, and its manifest.

`build.py` streams documents into a `SplitState` per split; when the pass ends,
`check_bytes` (the tokens decode to exactly the bytes read) and `check_not_empty` (each
split has documents, or says why not) run before `split_manifest` records the counts and
the files read, which a later reuse compares with the sources.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packlm.data.store.chat_overflow import Overflow
from packlm.data.store.corpus import OVERLONG, Corpus
from packlm.data.store.sources import ReadCounts, SourceError
from packlm.data.store.sources.entries import files_fingerprint
from packlm.data.store.token_store import StoreError, StoreWriter

log = logging.getLogger(__name__)


@dataclass
class StoreHeader:
    """What every manifest carries besides the counts."""

    fingerprint: dict[str, Any]
    eos_id: int
    pad_id: int


@dataclass
class Chunk:
    texts: list[str] = field(default_factory=list)
    ends: list[bool] = field(default_factory=list)
    """Per text: does it end its document (else a piece of a longer one follows)?"""
    doc_ids: list[str] = field(default_factory=list)
    """Per document ended in this chunk, as `sources`."""
    sources: list[int] = field(default_factory=list)
    nbytes: int = 0


@dataclass
class SplitState:
    writer: StoreWriter
    chunk: Chunk = field(default_factory=Chunk)
    nbytes: int = 0
    read: ReadCounts = field(default_factory=ReadCounts)
    duplicates: int = 0
    stored_bytes: int = 0
    """UTF-8 bytes the written tokens decode to (EOS excluded): must equal `nbytes`."""
    cuts_inside_pretokens: int = 0
    partial: list[np.ndarray] = field(default_factory=list)  # ids of a long document's pieces
    overflow: Overflow | None = None  # data.chat_overflow (conversations in the corpus)
    chat_start_id: int = -1
    overflow_counts: Counter = field(default_factory=Counter)
    """Conversations longer than a sample: tokens_in, tokens_dropped, conversations_cut,
    conversations_dropped, turns_dropped (`chat_overflow.apply_overflow`)."""


def check_bytes(dest: Path, split: str, st: SplitState) -> None:
    if st.stored_bytes != st.nbytes or st.partial:
        raise StoreError(
            f"{dest}: the {split} tokens decode to {st.stored_bytes} bytes, but {st.nbytes} bytes "
            "of text were read (a bug: please report it)"
        )


def check_not_empty(corpus: Corpus, state: dict[str, SplitState]) -> None:
    train, val = state["train"], state["val"]
    if corpus.shard is not None:  # one shard may hold no validation: the union is checked
        if train.writer.n_docs == 0:
            log.warning("data.shard=%d/%d holds no training documents", *corpus.shard)
        return
    if train.writer.n_docs == 0:
        raise corpus.no_documents(
            train.read, train.overflow_counts["conversations_dropped"], val.writer.n_docs > 0
        )
    if val.writer.n_docs > 0 or (corpus.hash_split and corpus.val_fraction == 0):
        return  # val_fraction=0 without val_sources: validation is off, the val store is empty
    overlong = val.overflow_counts["conversations_dropped"]
    lost = f", {overlong} {OVERLONG}" if overlong else ""
    if corpus.hash_split:
        why = lost[2:] or f"none of {train.writer.n_docs} documents hashed into it"
        raise SourceError(
            f"data.val_fraction={corpus.val_fraction}: the validation split is empty ({why}); "
            "raise data.val_fraction or give data.val_sources"
        )
    names = [s.name for s in corpus.val_sources]
    raise SourceError(
        f"data.val_sources={names}: the validation split is empty ({val.duplicates} duplicates of "
        f"training documents dropped, {val.read.empty} empty, {val.read.skipped_invalid_utf8} skipped "
        f"as invalid UTF-8{lost})"
    )


def _named(left_out: dict[str, list[str]], most: int = 10) -> dict[str, list[str]]:
    """The first names of what walks left out, by reason (`dropped` has their counts)."""
    return {reason: names[:most] for reason, names in left_out.items()}


def _bad_records(read: ReadCounts) -> dict[str, Any]:
    """Conversation records dropped, by reason, and the first of them named (absent when none)."""
    if not read.bad_records:
        return {}
    return {"bad_records": dict(read.bad_records), "bad_record_examples": read.bad_record_examples}


def _overflow(st: SplitState) -> dict[str, Any]:
    """data.chat_overflow's counts (absent without conversations); logged when it acted."""
    if st.overflow is None:
        return {}
    c = st.overflow_counts
    if c["conversations_cut"] or c["conversations_dropped"]:
        log.warning(
            "data %s: %d conversations longer than %d tokens (data.chat_overflow=%s): %d cut "
            "between turns, %d dropped; %d turns / %d of %d conversation tokens dropped",
            st.writer.path.name, c["conversations_cut"] + c["conversations_dropped"],
            st.overflow.max_tokens, st.overflow.policy, c["conversations_cut"],
            c["conversations_dropped"], c["turns_dropped"], c["tokens_dropped"], c["tokens_in"],
        )  # fmt: skip
    keys = ("tokens_in", "tokens_dropped", "conversations_cut", "conversations_dropped",
            "turns_dropped", "bytes_dropped")  # fmt: skip
    return {"chat_overflow": {**st.overflow.fingerprint(), **{k: int(c[k]) for k in keys}}}


def split_manifest(corpus: Corpus, header: StoreHeader, split: str, state) -> dict[str, Any]:
    """Counts, and per source what was read: its files' sizes and mtimes as they were after
    reading (`files_fingerprint`), which a reuse compares with the sources' (`prepared.py`)."""
    st = state[split]
    explicit_val = split == "val" and not corpus.hash_split
    sources = corpus.val_sources if explicit_val else corpus.sources
    read = state["val" if explicit_val else "train"].read.files_read
    dropped = st.read.dropped()
    for reason, names in st.read.left_out.items():  # once per build (docs/links.md)
        shown = "; ".join(names[:5]) + ("; ..." if len(names) > 5 else "")
        log.warning("data %s: left out %d %s: %s", split, len(names), reason.replace("_", " "),
                    shown)  # fmt: skip
    if split == "val":
        dropped["duplicate_of_train"] = st.duplicates
    if st.overflow_counts["conversations_dropped"]:
        dropped["overlong_conversations"] = st.overflow_counts["conversations_dropped"]
    return {
        "split": split,
        "fingerprint": header.fingerprint,
        "eos_id": header.eos_id,
        "pad_id": header.pad_id,
        "sources": [
            {"name": s.name, "read": files_fingerprint(read.get(s.index, []))} for s in sources
        ],
        "counts": {
            "bytes": st.nbytes,
            "dropped": dropped,
            "stored_bytes": st.stored_bytes,
            "cuts_inside_pretokens": st.cuts_inside_pretokens,
            "replaced_invalid_utf8": st.read.replaced_invalid_utf8,
            "normalized_newlines": st.read.normalized_newlines,
            **_bad_records(st.read),
            **_overflow(st),
            **({"left_out": _named(st.read.left_out)} if st.read.left_out else {}),
        },
    }
