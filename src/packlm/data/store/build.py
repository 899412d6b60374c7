"""Documents -> the train and val token stores, built in one streaming pass.

Documents of `data.sources` go to validation by content hash (`packlm.data.store.corpus`) unless
`data.val_sources` are given; those are read after all training documents, so an exact
duplicate of a training document can be dropped. Texts are grouped into chunks of about
`CHUNK_BYTES`, encoded on every core in order (`packlm.data.store.encode`), and appended to two
`StoreWriter`s inside one temporary directory that is renamed to `dest` only when both
stores are complete: a killed build leaves nothing a reader would take for a store.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from errno import ENOSPC
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from packlm.cache.entry import replace_dir, temporary_sibling
from packlm.data.store.corpus import Corpus
from packlm.data.store.encode import OrderedEncoder
from packlm.data.store.sources import ReadCounts, SourceError, iter_documents
from packlm.data.store.split import TrainHashes, content_hash
from packlm.data.store.token_store import StoreWriter, TokenStore, token_dtype

log = logging.getLogger(__name__)

CHUNK_BYTES = 256 * 1024
SPLITS = ("train", "val")


@dataclass
class StoreHeader:
    """What every manifest carries besides the counts."""

    fingerprint: dict[str, Any]
    eos_id: int
    pad_id: int


@dataclass
class _Chunk:
    texts: list[str] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    nbytes: int = 0


@dataclass
class _SplitState:
    writer: StoreWriter
    chunk: _Chunk = field(default_factory=_Chunk)
    nbytes: int = 0
    read: ReadCounts = field(default_factory=ReadCounts)
    duplicates: int = 0


def build_stores(
    corpus: Corpus,
    tokenizer: Any,
    header: StoreHeader,
    dest: Path,
    workers: int,
    progress: bool = True,
) -> tuple[TokenStore, TokenStore]:
    """Build `dest/train` and `dest/val`; replace `dest` only once both are complete.

    The caller holds the entry's lock (`packlm.cache.entry.locked`).
    """
    dest = Path(dest)
    tmp = temporary_sibling(dest)
    spill = temporary_sibling(dest)  # the encoder's results in flight
    vocab_size = tokenizer.vocab_size
    start = time.perf_counter()
    try:
        with (
            StoreWriter(tmp / "train", vocab_size) as train_writer,
            StoreWriter(tmp / "val", vocab_size) as val_writer,
            OrderedEncoder(
                tokenizer, header.eos_id, token_dtype(vocab_size), workers, spill
            ) as encoder,
            tqdm(
                total=corpus.total_bytes,
                unit="B",
                unit_scale=True,
                desc="token store",
                disable=not progress,
            ) as bar,
        ):
            state = {"train": _SplitState(train_writer), "val": _SplitState(val_writer)}
            _stream(corpus, encoder, state, bar)
            _check_not_empty(corpus, state)
            for split in SPLITS:
                state[split].writer.finish(_manifest(corpus, header, split, state[split]))
        replace_dir(tmp, dest)
    except ChildProcessError:  # a dead encoding worker (WorkerDied): its own message
        raise
    except OSError as e:  # reading errors are SourceErrors: this is a write (disk full, ...)
        hint = " (disk full: free space or set cache_dir elsewhere)" if e.errno == ENOSPC else ""
        raise OSError(
            e.errno, f"cannot write the token store {dest}: {e.strerror or e}{hint}"
        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(spill, ignore_errors=True)
    train, val = TokenStore.open(dest / "train"), TokenStore.open(dest / "val")
    seconds = time.perf_counter() - start
    text_bytes = state["train"].nbytes + state["val"].nbytes
    log.info(
        "built %s: train %d documents / %d tokens, val %d / %d; %.1f MB of text in %.1f s (%.2f MB/s, %d workers)",
        dest,
        train.n_docs,
        train.n_tokens,
        val.n_docs,
        val.n_tokens,
        text_bytes / 1e6,
        seconds,
        text_bytes / 1e6 / max(seconds, 1e-9),
        workers,
    )
    return train, val


def _stream(
    corpus: Corpus, encoder: OrderedEncoder, state: dict[str, _SplitState], bar: tqdm
) -> None:
    # With the hash split, identical texts share a split, so only explicit val_sources need the
    # training hashes to drop duplicates.
    train_hashes = None if corpus.hash_split else TrainHashes()
    for doc in iter_documents(corpus.sources, corpus.options, state["train"].read):
        data = doc.text.encode("utf-8")
        if corpus.goes_to_validation(data):
            _add(encoder, state, "val", doc, len(data), bar)
            continue
        if train_hashes is not None:
            train_hashes.add(content_hash(data))
        _add(encoder, state, "train", doc, len(data), bar)
    for doc in iter_documents(corpus.val_sources or [], corpus.options, state["val"].read):
        data = doc.text.encode("utf-8")
        if content_hash(data) in train_hashes:
            state["val"].duplicates += 1
            bar.update(len(data))
            continue
        _add(encoder, state, "val", doc, len(data), bar)
    for split in SPLITS:
        _flush(encoder, state, split, bar)
    for result in encoder.drain():
        _write(state, bar, *result)


def _add(
    encoder: OrderedEncoder, state: dict[str, _SplitState], split: str, doc, nbytes: int, bar
) -> None:
    chunk = state[split].chunk
    chunk.texts.append(doc.text)
    chunk.doc_ids.append(doc.doc_id)
    chunk.sources.append(doc.source_index)
    chunk.nbytes += nbytes
    if chunk.nbytes >= CHUNK_BYTES:
        _flush(encoder, state, split, bar)


def _flush(encoder: OrderedEncoder, state: dict[str, _SplitState], split: str, bar) -> None:
    chunk = state[split].chunk
    if not chunk.texts:
        return
    state[split].chunk = _Chunk()
    texts, chunk.texts = chunk.texts, []  # the encoder gets the texts; the chunk keeps the rest
    for result in encoder.submit(texts, (split, chunk)):
        _write(state, bar, *result)


def _write(state: dict[str, _SplitState], bar, tag, ids, lengths) -> None:
    split, chunk = tag
    state[split].writer.add_many(ids, lengths, chunk.doc_ids, chunk.sources)
    state[split].nbytes += chunk.nbytes
    bar.update(chunk.nbytes)


def _check_not_empty(corpus: Corpus, state: dict[str, _SplitState]) -> None:
    train, val = state["train"], state["val"]
    if train.writer.n_docs == 0:
        raise corpus.no_documents(train.read)
    if val.writer.n_docs > 0 or (corpus.hash_split and corpus.val_fraction == 0):
        return  # val_fraction=0 without val_sources: validation is off, the val store is empty
    if corpus.hash_split:
        raise SourceError(
            f"data.val_fraction={corpus.val_fraction}: the validation split is empty (none of "
            f"{train.writer.n_docs} documents hashed into it); raise data.val_fraction or give data.val_sources"
        )
    names = [s.name for s in corpus.val_sources]
    raise SourceError(
        f"data.val_sources={names}: the validation split is empty ({val.duplicates} duplicates of "
        f"training documents dropped, {val.read.empty} empty, {val.read.skipped_invalid_utf8} skipped "
        "as invalid UTF-8)"
    )


def _manifest(corpus: Corpus, header: StoreHeader, split: str, st: _SplitState) -> dict[str, Any]:
    explicit_val = split == "val" and not corpus.hash_split
    sources = corpus.val_sources if explicit_val else corpus.sources
    dropped = st.read.dropped()
    if split == "val":
        dropped["duplicate_of_train"] = st.duplicates
    return {
        "split": split,
        "fingerprint": header.fingerprint,
        "eos_id": header.eos_id,
        "pad_id": header.pad_id,
        "sources": [{"name": s.name} for s in sources],
        "counts": {
            "bytes": st.nbytes,
            "dropped": dropped,
            "replaced_invalid_utf8": st.read.replaced_invalid_utf8,
            "normalized_newlines": st.read.normalized_newlines,
        },
    }
