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
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packlm.cache.entry import mark_used
from packlm.cache.fingerprint import describe_change, digest, latest
from packlm.cache.hold import hold
from packlm.cache.lock import locked
from packlm.config.data import DataConfig
from packlm.config.data_checks import parse_shard
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.build import SPLITS, build_stores
from packlm.data.store.chat_overflow import Overflow
from packlm.data.store.corpus import Corpus
from packlm.data.store.encode import available_cores
from packlm.data.store.split_state import StoreHeader
from packlm.data.store.token_store import MANIFEST_FILE, StoreError, TokenStore
from packlm.data.store.union import StoreUnion, open_store
from packlm.data.store.verify import verify_checksums
from packlm.errors import ConfigError
from packlm.tokenizer.chat import CHAT_TOKENS, ChatFormat, ChatTokenError
from packlm.tokenizer.obtain import get_tokenizer, tokenizer_cached

log = logging.getLogger(__name__)

STORES_DIR = "stores"  # <cache_dir>/stores/<digest>/{train,val}: one entry per fingerprint
PAD_TOKEN = "<|pad|>"
PARALLEL_MIN_BYTES = 1 << 20
"""Below this much source text, worker processes cost more than they save."""


Dirs = Path | tuple[Path, ...]
"""A split's store directory, or (data.shards) its shards' directories in shard order."""


@dataclass(frozen=True)
class PreparedData:
    """Where everything is; plain paths and dicts, so it pickles cheaply into any process."""

    tokenizer: Any
    """The packlm Tokenizer the stores were encoded with."""
    tokenizer_dir: Path
    train_dir: Dirs
    val_dir: Dirs
    train_manifest: dict[str, Any]
    val_manifest: dict[str, Any]
    """The val store has no documents only when data.val_fraction=0 and no data.val_sources;
    with data.shards, the shards' manifests as one (`packlm.data.store.union`)."""

    def open(self, split: str) -> TokenStore:
        """The split's store (memmaps; milliseconds), the shards' union with data.shards."""
        return open_store({"train": self.train_dir, "val": self.val_dir}[split])

    @property
    def manifests(self) -> dict[str, dict[str, Any]]:
        return {"train": self.train_manifest, "val": self.val_manifest}


def prepare_stores(
    data: DataConfig,
    tokenizer: TokenizerConfig,
    cache_dir: str | Path,
    progress: bool = True,
    num_workers: int | None = None,
    build_shards: bool = False,
) -> PreparedData:
    """Train or load the tokenizer, build or reuse the stores, and open them.

    data.shard=i/N builds (or reuses) that shard's stores alone. data.shards=N opens the N
    shards' stores as one corpus; a missing one is a StoreError naming it, unless
    `build_shards` (`python -m packlm.prepare data.shards=N`): then it is built here.
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
    tokenizer = with_chat_tokens(tokenizer, corpus)
    shard = parse_shard(data.shard)
    if shard is not None:
        parts = [corpus.of_shard(*shard)]
    elif data.shards is not None:
        parts = corpus.shards(data.shards)
    else:
        parts = [corpus]
    read_only = shard is None and data.shards is not None and not build_shards
    if read_only and not tokenizer_cached(tokenizer, corpus.fingerprint(True), cache_dir):
        # no shard can have been built: say so now, not after training a tokenizer
        missing = [f"{i}/{data.shards} (not built: no tokenizer yet)" for i in range(data.shards)]
        raise StoreError(_missing_shards(data, missing, cache_dir))
    # One tokenizer for every shard: trained on the whole corpus's training split, under its
    # lock, by the first process to need it (the others wait and load it).
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
    chat = chat_format(tok, tok_dir, corpus)
    overflow = Overflow.of(data) if chat is not None else None
    stores: list[tuple[TokenStore, TokenStore] | None] = []
    missing: list[str] = []
    for part in parts:
        fingerprint = {
            **part.fingerprint(),
            "tokenizer": tok.digest(),
            "eos_id": eos_id,
            "pad_id": pad_id,
        }
        if overflow is not None:  # conversations longer than a sample: data.chat_overflow
            fingerprint["data.chat_overflow"] = overflow.fingerprint()
        dest = cache_dir / STORES_DIR / digest(fingerprint)
        if read_only:  # data.shards: the shards are built by data.shard=i/N
            found, problem = _open_cached(dest, fingerprint)
            if found is None:  # a reader rebuilds nothing: the problem without "rebuilding"
                why = re.sub(r",? rebuilding", "", problem) if problem else "not built"
                missing.append(f"{part.shard[0]}/{part.shard[1]} ({why})")
            stores.append(found)
            continue
        header = StoreHeader(fingerprint, eos_id, pad_id)
        workers = _workers(num_workers, part.total_bytes)
        stores.append(_open_or_build(part, tok, header, dest, workers, progress, chat, overflow))
    if missing:
        raise StoreError(_missing_shards(data, missing, cache_dir))
    for train, _ in stores:
        hold(train.path.parent)  # for this process's life: `python -m packlm.cache` refuses it
    if len(stores) == 1:
        train, val = stores[0]
        return PreparedData(tok, tok_dir, train.path, val.path, train.manifest, val.manifest)
    union = {split: StoreUnion([s[k] for s in stores]) for k, split in enumerate(SPLITS)}
    _check_union(data, union)
    return PreparedData(
        tok, tok_dir, union["train"].path, union["val"].path,
        union["train"].manifest, union["val"].manifest,
    )  # fmt: skip


def _open_or_build(
    corpus: Corpus, tok: Any, header: StoreHeader, dest: Path, workers: int, progress: bool,
    chat: ChatFormat | None = None, overflow: Overflow | None = None,
) -> tuple[TokenStore, TokenStore]:  # fmt: skip
    """The cached stores at `dest`, or built there under its lock."""
    stores, problem = _open_cached(dest, header.fingerprint)
    if stores is not None:
        return stores
    with locked(dest):
        # Another process (a sweep's sibling run, another shard's) may have built it meanwhile.
        stores, problem = _open_cached(dest, header.fingerprint)
        if stores is not None:
            return stores
        root = dest.parent
        previous = latest(root, f"*/train/{MANIFEST_FILE}", "fingerprint")
        log.info(
            "building token stores (%s) in %s",
            problem or describe_change(previous, header.fingerprint),
            dest,
        )
        return build_stores(corpus, tok, header, dest, workers, progress, chat, overflow)


def _missing_shards(data: DataConfig, missing: list[str], cache_dir: Path) -> str:
    which = ",".join(m.split(" ", 1)[0] for m in missing)
    return (
        f"data.shards={data.shards}: {len(missing)} of the shard stores are not in "
        f"{cache_dir / STORES_DIR}: {'; '.join(missing)}; build them with `python -m "
        f"packlm.prepare -m data.shard={which}` (with this run's data and tokenizer overrides and "
        f"cache_dir), or all at once with `python -m packlm.prepare data.shards={data.shards}`"
    )


def _check_union(data: DataConfig, union: dict[str, StoreUnion]) -> None:
    """What one store's build refuses, refused for the union of the shards."""
    if union["train"].n_docs == 0:
        raise StoreError(f"data.shards={data.shards}: the shards hold no training documents")
    if union["val"].n_docs == 0 and (data.val_sources is not None or data.val_fraction > 0):
        raise StoreError(
            f"data.shards={data.shards}: the validation split is empty in every shard "
            "(raise data.val_fraction or give data.val_sources)"
        )


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
    listed = fingerprint.get(key)
    if listed is None:  # no val_sources: the hash split of data.sources
        listed = fingerprint["data.sources"]
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


def with_chat_tokens(cfg: TokenizerConfig, corpus: Corpus) -> TokenizerConfig:
    """A corpus with conversations needs the chat format's control tokens: a tokenizer
    trained for it has them as special tokens (never merged); a loaded one must have its own
    (`chat_format`)."""
    if not corpus.has_chat or cfg.path is not None:
        return cfg
    missing = [t for t in CHAT_TOKENS if t not in cfg.special_tokens]
    return replace(cfg, special_tokens=[*cfg.special_tokens, *missing]) if missing else cfg


def chat_format(tok: Any, tok_dir: Path, corpus: Corpus) -> ChatFormat | None:
    """The chat format's ids in `tok` when a source holds conversations, else None."""
    if not corpus.has_chat:
        return None
    try:
        return ChatFormat.of(tok)
    except ChatTokenError as e:
        raise ConfigError(
            f"tokenizer.path={str(tok_dir)!r}: {e}; conversations need a tokenizer with "
            "<|im_start|> and <|im_end|> (or train one: leave tokenizer.path unset)"
        ) from None


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
