"""Documents -> the train and val token stores, built in one streaming pass.

Documents of `data.sources` go to validation by content hash (`packlm.data.store.corpus`) unless
`data.val_sources` are given; those are read after all training documents, so an exact
duplicate of a training document can be dropped. Texts are grouped into chunks of about
`CHUNK_BYTES`, encoded on every core in order (`packlm.data.store.encode`), and appended to two
`StoreWriter`s inside one temporary directory that is renamed to `dest` only when both
stores are complete: a killed build leaves nothing a reader would take for a store.

A document longer than `PIECE_CHARS` is encoded in pieces cut where no id changes
(`DocumentPieces`): memory per document is its text and ids, not a list of every id. Each
split records the UTF-8 bytes read and those its tokens decode to (`stored_bytes`, EOS
excluded); the build fails if they differ.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm  # not tqdm.auto: in Jupyter without ipywidgets it warns at import

from packlm.cache.entry import replace_dir, temporary_sibling
from packlm.data.store.chat_overflow import Overflow, apply_overflow
from packlm.data.store.corpus import Corpus
from packlm.data.store.encode import DocumentPieces, OrderedEncoder
from packlm.data.store.sources import ReadCounts, iter_documents
from packlm.data.store.split import TrainHashes, content_hash, is_validation
from packlm.data.store.split_state import (
    Chunk,
    SplitState,
    StoreHeader,
    check_bytes,
    check_not_empty,
    split_manifest,
)
from packlm.data.store.token_store import StoreWriter, TokenStore, token_dtype
from packlm.errors import write_error
from packlm.tokenizer.chat import ChatFormat
from packlm.tokenizer.chat import text_bytes as chat_text_bytes
from packlm.tokenizer.pretokenize import PIECE_CHARS
from packlm.tokenizer.training.counting import utf8_len

log = logging.getLogger(__name__)

CHUNK_BYTES = 256 * 1024
SPLITS = ("train", "val")


def build_stores(
    corpus: Corpus,
    tokenizer: Any,
    header: StoreHeader,
    dest: Path,
    workers: int,
    progress: bool = True,
    chat: ChatFormat | None = None,
    overflow: Overflow | None = None,
) -> tuple[TokenStore, TokenStore]:
    """Build `dest/train` and `dest/val`; replace `dest` only once both are complete.

    `chat`: the chat format's ids in `tokenizer`, when a source holds conversations (their
    role codes are stored beside the ids); `overflow`: what happens to a conversation longer
    than a sample (`packlm.data.store.chat_overflow`). The caller holds the entry's lock
    (`packlm.cache.entry.locked`).
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
                tokenizer, header.eos_id, token_dtype(vocab_size), workers, spill, chat
            ) as encoder,
            tqdm(
                total=corpus.total_bytes,
                unit="B",
                unit_scale=True,
                desc="token store",
                disable=not progress,
            ) as bar,
        ):
            state = {"train": SplitState(train_writer), "val": SplitState(val_writer)}
            if overflow is not None:
                for st in state.values():
                    st.overflow, st.chat_start_id = overflow, chat.start_id
            enc = DocumentPieces(tokenizer)
            if chat is not None:  # control tokens decode to no text, as special tokens
                enc.byte_lengths[[chat.start_id, chat.end_id]] = 0
            _stream(corpus, encoder, state, bar, enc)
            check_not_empty(corpus, state)
            for split in SPLITS:
                check_bytes(dest, split, state[split])
                state[split].writer.finish(split_manifest(corpus, header, split, state))
        replace_dir(tmp, dest)
    except ChildProcessError:  # a dead encoding worker (WorkerDied): its own message
        raise
    except OSError as e:  # reading errors are SourceErrors: this is a write (disk full, ...)
        raise write_error(e, f"the token store {dest}", "set cache_dir elsewhere") from None
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


def _stream(corpus: Corpus, encoder: OrderedEncoder, state, bar: tqdm, enc: DocumentPieces) -> None:
    # With the hash split, identical texts share a split, so only explicit val_sources need the
    # training hashes to drop duplicates.
    train_hashes = None if corpus.hash_split else TrainHashes()
    if corpus.other_training:  # shard 0: the other shards' training documents, hashed only
        log.info("data.shard: reading the other shards' training files for the duplicate check")
        for doc in iter_documents(corpus.other_training, corpus.options, ReadCounts()):
            train_hashes.add(_measure(doc.text)[1])
    for doc in iter_documents(corpus.sources, corpus.options, state["train"].read):
        nbytes, h = _measure(doc.text)
        if corpus.hash_split and is_validation(h, corpus.val_fraction):
            _add(encoder, state, "val", doc, nbytes, bar, enc)
            continue
        if train_hashes is not None:
            train_hashes.add(h)
        _add(encoder, state, "train", doc, nbytes, bar, enc)
    for doc in iter_documents(corpus.val_sources or [], corpus.options, state["val"].read):
        nbytes, h = _measure(doc.text)
        if h in train_hashes:
            state["val"].duplicates += 1
            bar.update(nbytes)
            continue
        _add(encoder, state, "val", doc, nbytes, bar, enc)
    for split in SPLITS:
        _flush(encoder, state, split, bar, enc)
    for result in encoder.drain():
        _write(state, bar, enc, *result)


def _measure(text: str) -> tuple[int, int]:
    """(UTF-8 bytes, `content_hash`) of a document; a long one is encoded block by block."""
    if len(text) <= PIECE_CHARS:
        data = text.encode("utf-8")
        return len(data), content_hash(data)
    h, nbytes = hashlib.blake2b(digest_size=8), 0  # content_hash's, fed in blocks
    for i in range(0, len(text), PIECE_CHARS):
        block = text[i : i + PIECE_CHARS].encode("utf-8")
        h.update(block)
        nbytes += len(block)
    return nbytes, int.from_bytes(h.digest(), "little")


def _add(encoder, state: dict[str, SplitState], split, doc, nbytes: int, bar, enc) -> None:
    st = state[split]
    if doc.turns is not None:  # a conversation: rendered whole by the encoder
        pieces = [(doc.turns, True, chat_text_bytes(doc.turns))]
    elif len(doc.text) <= enc.size:
        pieces = [(doc.text, True, nbytes)]
    else:
        pieces = _pieces(doc, st, enc)
    for text, end, size in pieces:
        chunk = st.chunk
        chunk.texts.append(text)
        chunk.ends.append(end)
        if end:
            chunk.doc_ids.append(doc.doc_id)
            chunk.sources.append(doc.source_index)
        chunk.nbytes += size
        if chunk.nbytes >= CHUNK_BYTES:
            _flush(encoder, state, split, bar, enc)


def _pieces(doc, st: SplitState, enc: DocumentPieces):
    """(piece, ends the document, UTF-8 bytes) of a long document; inexact cuts counted, logged."""
    spans, inexact = enc.spans(doc.text)
    if inexact:
        st.cuts_inside_pretokens += inexact
        log.warning(
            "%s: %d cuts inside pre-tokens longer than %d characters with no place where no merge "
            "crosses; the ids at these cuts may differ from encoding the pre-token whole (every "
            "byte is stored)", doc.doc_id, inexact, enc.max_token,
        )  # fmt: skip
    for k, (start, end) in enumerate(spans):
        piece = doc.text[start:end]
        yield piece, k == len(spans) - 1, utf8_len(piece)


def _flush(encoder: OrderedEncoder, state, split: str, bar, enc) -> None:
    chunk = state[split].chunk
    if not chunk.texts:
        return
    state[split].chunk = Chunk()
    texts, chunk.texts = chunk.texts, []  # the encoder gets the texts; the chunk keeps the rest
    pieces = () if all(chunk.ends) else (chunk.ends,)  # pieces of a long document inside
    for result in encoder.submit(texts, (split, chunk), *pieces):
        _write(state, bar, enc, *result)


def _write(
    state: dict[str, SplitState], bar, enc: DocumentPieces, tag, ids, lengths, codes=None
) -> None:
    split, chunk = tag
    st = state[split]
    st.stored_bytes += int(enc.byte_lengths[ids].sum())
    if st.partial or not all(chunk.ends):
        waiting = sum(map(len, st.partial))  # text pieces: their codes are TEXT (0)
        ids, lengths = _join_pieces(st, ids, lengths, np.asarray(chunk.ends, dtype=bool))
        if codes is not None and len(lengths):  # the head holds the waiting pieces
            codes = np.concatenate([np.zeros(waiting, np.uint8), codes[: len(ids) - waiting]])
    doc_ids, sources = chunk.doc_ids, chunk.sources
    if st.overflow is not None and codes is not None and len(lengths):
        whole = ids
        ids, lengths, codes, doc_ids, sources = apply_overflow(
            ids, lengths, codes, doc_ids, sources, st.overflow, st.chat_start_id,
            st.overflow_counts,
        )  # fmt: skip
        if ids is not whole:  # the text it left out: prepare's bytes read = stored + this
            st.overflow_counts["bytes_dropped"] += int(
                enc.byte_lengths[whole].sum() - enc.byte_lengths[ids].sum()
            )
    if len(lengths):
        st.writer.add_many(ids, lengths, doc_ids, sources, codes)
    st.nbytes += chunk.nbytes
    bar.update(chunk.nbytes)


def _join_pieces(st: SplitState, ids, lengths, ends) -> tuple[np.ndarray, np.ndarray]:
    """Ids and lengths of the documents that end in this result, with their earlier pieces;
    the ids after the last end wait in `st.partial`."""
    stops = np.cumsum(lengths)  # where each piece's ids end
    doc_stops = stops[ends]
    done = int(doc_stops[-1]) if len(doc_stops) else 0
    head, rest = ids[:done], ids[done:]
    doc_lengths = np.diff(doc_stops, prepend=0).astype(np.int64)
    if len(doc_stops) and st.partial:
        doc_lengths[0] += sum(map(len, st.partial))
        head, st.partial = np.concatenate([*st.partial, head]), []
    if len(rest):
        st.partial.append(rest)
    return head, doc_lengths
