"""Prepare time: sources -> documents -> token store, built once per fingerprint and cached.

1. `default_corpus.py`: no sources given -> the Python standard library's own files.
2. `sources/`: `data.sources` entries (paths, globs, directories with include/exclude,
   compressed text and JSONL, Parquet/Arrow, {path, weight}) -> `Source`s -> `Document`s
   (text, id, source), with what reading dropped or replaced counted.
3. `split.py`: a document's content hash -> train or validation (stable, never by position).
4. `corpus.py`: `Corpus` = the resolved sources and options of a data config: its documents
   in split order and the fingerprint that names the cache entry.
5. `encode.py`: texts -> token ids in worker processes, results in submission order.
6. `layout.py`: the store's files, named once (tokens.bin, doc_offsets.npy, ..., manifest.json).
7. `token_store.py`: `TokenStore` reads a store (memmaps), `StoreWriter` appends to one;
   `verify.py` checks a store against its manifest (and the manifest itself) when it is opened;
   `paragraphs.py` derives (and caches beside it) where paragraphs start.
8. `build.py`: a `Corpus` + tokenizer -> the train and val stores in one streaming pass, in a
   temporary directory renamed into place when both are complete; `split_state.py` is what one
   split counts, checks and writes into its manifest.
9. `prepared.py`: `prepare_stores(data, tokenizer config, cache_dir)` -> tokenizer (through
   `packlm.tokenizer.obtain`) and both stores, reused when the fingerprint matches.
10. `shards.py` + `union.py`: `data.shard=i/N` builds one shard; `data.shards=N` opens the N as
   one `StoreUnion`, documents and tokens as one store's.
"""

from packlm.data.store.corpus import Corpus
from packlm.data.store.prepared import PreparedData, prepare_stores
from packlm.data.store.sources import Document, SourceError, iter_documents, resolve_sources
from packlm.data.store.token_store import StoreError, StoreWriter, TokenStore, write_store

__all__ = [
    "Corpus",
    "Document",
    "PreparedData",
    "SourceError",
    "StoreError",
    "StoreWriter",
    "TokenStore",
    "iter_documents",
    "prepare_stores",
    "resolve_sources",
    "write_store",
]
