"""Config -> tokenizer + train and val token stores, cached: the DataModule's one entry point.

`prepare_stores` is idempotent: the first call trains (or loads) the tokenizer and builds
both stores; later calls with the same fingerprint only stat the sources and open the
memmaps, so it is safe to call from `prepare_data` on rank 0 and again from `setup` on
every rank. A changed source, tokenizer or option gives a new fingerprint, hence a new
cache entry, and the log says what changed. A cached store is reused only when its
manifest's record of what was read (each source's files, sizes, mtimes) is the sources'
listing now: a store from a file that changed while it was read is never reused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packlm.cache.entry import hold, locked, mark_used
from packlm.cache.fingerprint import describe_change, digest, latest
from packlm.data.config import DataConfig
from packlm.data.store.build import StoreHeader, build_stores
from packlm.data.store.corpus import Corpus
from packlm.data.store.encode import available_cores
from packlm.data.store.token_store import MANIFEST_FILE, StoreError, TokenStore
from packlm.data.store.verify import verify_checksums
from packlm.errors import ConfigError
from packlm.tokenizer.config import TokenizerConfig
from packlm.tokenizer.obtain import get_tokenizer

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = ".cache/packlm"
"""Where tokenizers and stores are cached unless `cache_dir` says otherwise."""
STORES_DIR = "stores"  # <cache_dir>/stores/<digest>/{train,val}: one entry per fingerprint
PAD_TOKEN = "<|pad|>"
PARALLEL_MIN_BYTES = 1 << 20
"""Below this much source text, worker processes cost more than they save."""


@dataclass(frozen=True)
class PreparedData:
    """Where everything is; plain paths and dicts, so it pickles cheaply into any process."""

    tokenizer: Any
    """The packlm Tokenizer the stores were encoded with."""
    tokenizer_dir: Path
    train_dir: Path
    val_dir: Path
    train_manifest: dict[str, Any]
    val_manifest: dict[str, Any]
    """The val store has no documents only when data.val_fraction=0 and no data.val_sources."""

    def open(self, split: str) -> TokenStore:
        """The split's store (memmaps; milliseconds)."""
        return TokenStore.open({"train": self.train_dir, "val": self.val_dir}[split])

    @property
    def manifests(self) -> dict[str, dict[str, Any]]:
        return {"train": self.train_manifest, "val": self.val_manifest}


def prepare_stores(
    data: DataConfig,
    tokenizer: TokenizerConfig,
    cache_dir: str | Path,
    progress: bool = True,
    num_workers: int | None = None,
) -> PreparedData:
    """Train or load the tokenizer, build or reuse both stores, and open them.

    `num_workers`: encoding processes; None uses every core (none for corpora under 1 MB).
    """
    data.validate()
    tokenizer.validate()
    if PAD_TOKEN not in tokenizer.special_tokens:
        raise ConfigError(
            f"tokenizer.special_tokens={list(tokenizer.special_tokens)}: must include {PAD_TOKEN!r} "
            "(the PAD id of every batch)"
        )
    cache_dir = Path(cache_dir).expanduser().resolve()
    corpus = Corpus.from_config(data)
    tok, tok_dir = get_tokenizer(
        tokenizer,
        corpus.fingerprint(training_only=True),
        lambda: TrainingTexts(corpus),
        cache_dir,
        progress,
    )
    if tokenizer.path is None:  # the cached one, held like the store below
        hold(tok_dir)
    eos_id = _special_id(tok, tok_dir, tokenizer, tokenizer.special_tokens[0])
    pad_id = _special_id(tok, tok_dir, tokenizer, PAD_TOKEN)
    fingerprint = {
        **corpus.fingerprint(),
        "tokenizer": tok.digest(),
        "eos_id": eos_id,
        "pad_id": pad_id,
    }
    header = StoreHeader(fingerprint, eos_id, pad_id)
    root = cache_dir / STORES_DIR
    dest = root / digest(fingerprint)
    stores, problem = _open_cached(dest, fingerprint)
    if stores is None:
        with locked(dest):
            # Another process (a sweep's sibling run) may have built it while we waited.
            stores, problem = _open_cached(dest, fingerprint)
            if stores is None:
                previous = latest(root, f"*/train/{MANIFEST_FILE}", "fingerprint")
                log.info(
                    "building token stores (%s) in %s",
                    problem or describe_change(previous, fingerprint),
                    dest,
                )
                workers = _workers(num_workers, corpus.total_bytes)
                stores = build_stores(corpus, tok, header, dest, workers, progress)
    hold(dest)  # for this process's life: `python -m packlm.cache` refuses to remove it
    train, val = stores
    return PreparedData(tok, tok_dir, train.path, val.path, train.manifest, val.manifest)


class TrainingTexts:
    """The training split's texts, with `total_bytes` for the pre-tokenizing bar: the source
    files' size, less the validation fraction (an estimate for compressed or JSON sources)."""

    def __init__(self, corpus: Corpus):
        self.corpus = corpus
        on_disk = sum(s.total_bytes for s in corpus.sources)
        self.total_bytes = int(on_disk * (1 - corpus.val_fraction if corpus.hash_split else 1))

    def __iter__(self):
        return self.corpus.training_texts()


def _open_cached(
    dest: Path, fingerprint: dict[str, Any]
) -> tuple[tuple[TokenStore, TokenStore] | None, str | None]:
    """((train, val), None) on a hit; (None, why it is unusable) or (None, None) when absent."""
    if not dest.exists():
        return None, None
    try:
        stores = TokenStore.open(dest / "train"), TokenStore.open(dest / "val")
        problem = next(filter(None, (verify_checksums(s.path, s.manifest) for s in stores)), None)
    except (StoreError, OSError) as e:
        problem = str(e)
    if problem:
        return None, f"the cached store is damaged, rebuilding ({problem})"
    if any(s.manifest.get("fingerprint") != fingerprint for s in stores):
        return None, f"the cached store in {dest} was written for another fingerprint, rebuilding"
    problem = next(filter(None, (_read_other(s, fingerprint) for s in stores)), None)
    if problem:
        return None, problem
    mark_used(dest)
    return stores, None


def _read_other(store: TokenStore, fingerprint: dict[str, Any]) -> str | None:
    """Why the store's record of what was read differs from the sources' listing, or None."""
    key = "data.val_sources" if store.manifest.get("split") == "val" else "data.sources"
    listed = fingerprint.get(key) or fingerprint["data.sources"]  # no val_sources: hash split
    recorded = store.manifest.get("sources", [])
    where = store.path / MANIFEST_FILE
    if len(recorded) != len(listed) or any("read" not in r for r in recorded):
        return f"{where} does not record what was read (an older packlm wrote it), rebuilding"
    for r, s in zip(recorded, listed, strict=True):
        read, now = r["read"], {k: s[k] for k in ("files", "bytes", "digest")}
        if read != now:
            return (
                f"{where}: source {s['name']!r} was read as {read['files']} files, "
                f"{read['bytes']} bytes, but is {now['files']} files, {now['bytes']} bytes "
                "(or other modification times) now, rebuilding"
            )
    return None


def _special_id(tok: Any, tok_dir: Path, cfg: TokenizerConfig, token: str) -> int:
    ids = tok.special_token_ids
    if token not in ids:
        raise ConfigError(
            f"tokenizer.special_tokens={list(cfg.special_tokens)}: {token!r} is not a special token "
            f"of the tokenizer in {tok_dir} (it has {list(ids)})"
        )
    return int(ids[token])


def _workers(requested: int | None, total_bytes: int) -> int:
    if requested is not None:
        return requested
    cores = available_cores()
    return cores if cores > 1 and total_bytes >= PARALLEL_MIN_BYTES else 0
