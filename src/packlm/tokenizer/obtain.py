"""The tokenizer of a data configuration: loaded from `tokenizer.path`, or trained and cached.

A trained tokenizer depends on the training documents (never the validation split) and
the tokenizer options, so it is cached under `<cache_dir>/tokenizers/<digest>` of exactly
those; a second run, or a sweep that changes only `data.window`, loads it in milliseconds.

Loading files (GPT-2's, a saved directory, a tokenizer.json, a .tiktoken file) keeps what
it derives in `tables.py`.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from packlm.cache.entry import mark_used, replace_dir, temporary_sibling
from packlm.cache.fingerprint import describe_change, digest, latest
from packlm.cache.lock import locked
from packlm.config.tokenizer import TokenizerConfig
from packlm.errors import ConfigError, write_error

log = logging.getLogger(__name__)

TOKENIZERS_DIR = "tokenizers"  # <cache_dir>/tokenizers/<digest>: one trained tokenizer each
CACHE_FILE = "packlm_cache.json"
"""Written next to the tokenizer's own files: the fingerprint it was trained for."""


def cache_fingerprint(cfg: TokenizerConfig, training_documents: dict[str, Any]) -> dict[str, Any]:
    fp = {
        "tokenizer.vocab_size": cfg.vocab_size,
        "tokenizer.special_tokens": list(cfg.special_tokens),
        "tokenizer.pattern": cfg.pattern,
        "training_documents": training_documents,
    }
    if cfg.sample_bytes is not None:  # absent when null: the keys of earlier entries still hold
        fp["tokenizer.sample_bytes"] = cfg.sample_bytes
    return fp


class FirstBytes:
    """The first `limit` UTF-8 bytes of `texts` (tokenizer.sample_bytes): whole texts, and the
    one that reaches the limit cut there (at a character boundary); counts what it gave."""

    def __init__(self, texts: Iterable[str], limit: int):
        self.texts, self.limit = texts, limit
        self.used = self.documents = 0
        self.cut = False
        available = getattr(texts, "total_bytes", None)
        self.total_bytes = limit if available is None else min(limit, available)

    def __iter__(self):
        for text in self.texts:
            data = text.encode("utf-8")
            room = self.limit - self.used
            if len(data) > room:  # a character cut in two is dropped
                text, self.cut = data[:room].decode("utf-8", errors="ignore"), True
                data = text.encode("utf-8")
            self.used += len(data)
            self.documents += 1
            yield text
            if self.cut or self.used >= self.limit:
                return

    def describe(self, available: int | None) -> str:
        of = "" if available is None else f" of about {available:,} (the training split's size)"
        cut = ", the last one cut" if self.cut else ""
        docs = f"{self.documents:,} document{'s' if self.documents != 1 else ''}"
        return (
            f"tokenizer.sample_bytes={self.limit:,}: trained on the first {self.used:,} bytes"
            f"{of}, {docs}{cut}"
        )


def get_tokenizer(
    cfg: TokenizerConfig,
    training_documents: dict[str, Any],
    train_texts: Callable[[], Iterable[str]],
    cache_dir: Path,
    progress: bool = True,
) -> tuple[Any, Path]:
    """(tokenizer, its directory): `tokenizer.path` if set, else the cached or newly trained one.

    `train_texts()` streams the training split's texts; it is called only when training.
    """
    root = Path(cache_dir) / TOKENIZERS_DIR
    if cfg.path is not None:
        specials, pattern = cfg.special_tokens, cfg.pattern
        return load_path(cfg.path, "tokenizer.path", specials, pattern, root), Path(cfg.path)

    fingerprint = cache_fingerprint(cfg, training_documents)
    dest = root / digest(fingerprint)
    tokenizer, problem = _load_cached(dest, fingerprint, root)
    if tokenizer is not None:
        return tokenizer, dest
    with locked(dest):
        # another process may have trained it
        tokenizer, problem = _load_cached(dest, fingerprint, root)
        if tokenizer is not None:
            return tokenizer, dest
        reason = problem or describe_change(
            latest(root, f"*/{CACHE_FILE}", "fingerprint"), fingerprint
        )
        log.info("training the tokenizer (%s) into %s", reason, dest)
        texts = train_texts()
        if cfg.sample_bytes is not None:
            texts = FirstBytes(texts, cfg.sample_bytes)
        tokenizer = _train(cfg, texts, progress)
        if isinstance(texts, FirstBytes):
            log.info("%s", texts.describe(getattr(texts.texts, "total_bytes", None)))
        tmp = temporary_sibling(dest)
        try:
            tmp.mkdir(parents=True)
            tokenizer.save(tmp)
            meta = {"fingerprint": fingerprint, "tokenizer_digest": tokenizer.digest()}
            (tmp / CACHE_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True), "utf-8")
            replace_dir(tmp, dest)
        except OSError as e:
            raise write_error(e, f"the tokenizer cache {dest}", "set cache_dir elsewhere") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer, dest


def tokenizer_cached(cfg: TokenizerConfig, training_documents: dict[str, Any], cache_dir) -> bool:
    """Is the tokenizer there without training (given by a path, or trained and cached)?"""
    if cfg.path is not None:
        return True
    dest = Path(cache_dir) / TOKENIZERS_DIR / digest(cache_fingerprint(cfg, training_documents))
    return (dest / CACHE_FILE).is_file()


def load_path(
    path: str | Path,
    key: str = "tokenizer.path",
    special_tokens: Iterable[str] = ("<|endoftext|>", "<|pad|>"),
    pattern: str = "gpt2",
    cache_dir: str | Path | None = None,
) -> Any:
    """The tokenizer at `path`: a packlm saved directory, a GPT-2 style vocab.json +
    merges.txt directory, a Hugging Face tokenizer.json (or a directory holding one), or
    a .tiktoken ranks file. Files without their own special tokens and pattern (GPT-2's,
    .tiktoken) take `special_tokens` / `pattern`; those of a tokenizer.json are added to
    `special_tokens` (a missing one, e.g. "<|pad|>", gets a new id at the end). With a
    `cache_dir`, each keeps its derived tables there (`with_tables`): a later load of the
    same files reads arrays, not the files (0.04 s, not 0.3-0.8 s for GPT-2's vocabulary)."""
    from packlm.tokenizer import Tokenizer, formats, hf
    from packlm.tokenizer.pretokenize import check_special_tokens
    from packlm.tokenizer.tables import with_tables

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{key}={str(path)!r}: no such directory or file")
    specials = list(special_tokens)
    try:
        if path.is_dir() and _is_packlm_dir(path):
            return Tokenizer.load(path, cache_dir=cache_dir)
        if path.is_dir() and (path / formats.VOCAB).is_file() and (path / formats.MERGES).is_file():
            return Tokenizer.from_files(path / formats.VOCAB, path / formats.MERGES, specials,
                                        pattern, cache_dir=cache_dir)  # fmt: skip
        if path.is_dir() and (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        if path.is_file() and path.suffix == ".json":
            options = {"files": "tokenizer.json", "special_tokens": specials}
            build = lambda: hf.load_tokenizer_json(Tokenizer, path, specials)  # noqa: E731
            return with_tables(Tokenizer, cache_dir, [path], options, build, "auto")
        if path.is_file() and path.suffix == ".tiktoken":
            specials = check_special_tokens(specials)
            options = {"files": "tiktoken", "special_tokens": specials, "pattern": pattern}
            build = lambda: Tokenizer(*formats.read_tiktoken(path), specials, pattern)  # noqa: E731
            return with_tables(Tokenizer, cache_dir, [path], options, build, "auto")
    except (ValueError, OSError) as e:
        raise ConfigError(f"{key}={str(path)!r}: {e}") from None
    raise ConfigError(
        f"{key}={str(path)!r}: not a tokenizer (expected a packlm tokenizer directory, a folder "
        "with vocab.json + merges.txt or tokenizer.json, a tokenizer.json or a .tiktoken file)"
    )


def _is_packlm_dir(path: Path) -> bool:
    """Whether `path` holds packlm's saved tokenizer: its config says so, or is there but is
    no JSON object (then `Tokenizer.load` names what is wrong, where the folder would load
    as GPT-2's files without its special tokens and digest). A Hugging Face folder's own
    tokenizer_config.json is a JSON object of another format."""
    from packlm.tokenizer import formats

    config = path / formats.CONFIG
    if not (config.exists() or config.is_symlink()):
        return False
    try:
        found = json.loads(formats.read_file(config, "config"))
    except (OSError, ValueError, RecursionError):  # a FIFO is refused, not read
        return True
    return not isinstance(found, dict) or found.get("format") == formats.FORMAT


def _load_cached(dest: Path, fingerprint: dict[str, Any], root: Path) -> tuple[Any, str | None]:
    """(tokenizer, None) on a hit; (None, why not) when the entry exists but is unusable."""
    from packlm.tokenizer import Tokenizer

    meta_path = dest / CACHE_FILE
    if not meta_path.is_file():
        return None, None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("fingerprint") != fingerprint:
            return None, f"{meta_path} was written for another fingerprint"
        tokenizer = Tokenizer.load(dest, cache_dir=root)
    except Exception as e:  # any unreadable cache entry is rebuilt, never trusted
        return None, f"the cached tokenizer in {dest} cannot be loaded ({type(e).__name__}: {e})"
    mark_used(dest)
    return tokenizer, None


def _train(cfg: TokenizerConfig, texts: Iterable[str], progress: bool) -> Any:
    from packlm.tokenizer import Tokenizer, train_bpe_from_iterator

    vocab, merges = train_bpe_from_iterator(
        texts, cfg.vocab_size, list(cfg.special_tokens), pattern=cfg.pattern, progress=progress
    )
    return Tokenizer(vocab, merges, special_tokens=list(cfg.special_tokens), pattern=cfg.pattern)
