"""What a cache directory holds, and removing it: the data behind `python -m packlm.cache`.

1. `entries(cache_dir)`: every entry (a token store pair, a trained tokenizer, a tokenizer
   saved from a checkpoint, the tables derived from loading tokenizer files), with its size
   on disk, when it was last used (its modification time: `mark_used` sets it on each hit)
   and, in a few words, what it was built from.
2. `remove(entry)`: under the entry's lock, so never half of an entry a run is building;
   refused (EntryInUse, naming the run) while a live run holds it (`entry.hold`); renamed
   aside, checked for a reader once more (a run that opened it meanwhile: renamed back and
   refused), then deleted, so a run starting now finds it whole or not at all. The next run
   that needs it rebuilds it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packlm.cache.hold import holders, refuse_if_in_use, release_dir
from packlm.cache.lock import locked
from packlm.data.store.layout import MANIFEST_FILE
from packlm.data.store.prepared import STORES_DIR
from packlm.tokenizer.obtain import CACHE_FILE, TOKENIZERS_DIR
from packlm.tokenizer.tables import TABLES_DIR


@dataclass(frozen=True)
class Entry:
    kind: str  # "store", "tokenizer", "checkpoint tokenizer" or "tables"
    path: Path
    bytes: int
    last_used: float  # seconds since the epoch
    built_from: str

    @property
    def name(self) -> str:
        """What `remove` takes: the digest (a directory's name, a tables file's without .npz)."""
        return self.path.name.removesuffix(".npz")

    def unused_days(self, now: float | None = None) -> float:
        return ((time.time() if now is None else now) - self.last_used) / 86400


def entries(cache_dir: str | Path) -> list[Entry]:
    """Every entry under `cache_dir`, least recently used first (hidden names are a build's
    temporary or a lock, never listed)."""
    root = Path(cache_dir).expanduser()
    found = [*_stores(root / STORES_DIR), *_tokenizers(root / TOKENIZERS_DIR)]
    return sorted(found, key=lambda e: e.last_used)


def remove(entry: Entry) -> None:
    """Delete one entry, waiting for a run that is building it; EntryInUse when a live run
    holds it (see the module's docstring)."""
    lock = entry.path.with_name(f".{entry.path.name}.lock")
    with locked(entry.path):
        refuse_if_in_use(entry.path)
        if entry.path.exists():
            aside = entry.path.with_name(f".{entry.path.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(entry.path, aside)
            owners = holders(entry.path)
            if owners:  # a run recorded itself after the check: its entry stays
                os.replace(aside, entry.path)
                refuse_if_in_use(entry.path, owners)
            shutil.rmtree(aside) if aside.is_dir() else aside.unlink()
        release_dir(entry.path)
        lock.unlink(missing_ok=True)  # a run waiting on it retries on a fresh lock file


def _listed(root: Path) -> Iterator[Path]:
    if root.is_dir():
        yield from (p for p in sorted(root.iterdir()) if not p.name.startswith("."))


def _stores(root: Path) -> Iterator[Entry]:
    for path in _listed(root):
        manifest = _json(path / "train" / MANIFEST_FILE)
        names = [s.get("name", "?") for s in manifest.get("sources", [])]
        tokens = (manifest.get("counts") or {}).get("tokens")
        built = f"{_names(names)}, vocab {manifest.get('vocab_size', '?')}"
        if tokens is not None:
            built += f", {tokens:,} training tokens"
        shard = (manifest.get("fingerprint") or {}).get("data.shard")
        if shard is not None:
            built += f", shard {shard}"
        yield _entry("store", path, built if manifest else "no readable manifest")


def _tokenizers(root: Path) -> Iterator[Entry]:
    for path in _listed(root):
        if path.name == TABLES_DIR:
            for tables in _listed(path):
                yield _entry("tables", tables, "derived from loading tokenizer files")
        elif path.name.startswith("checkpoint-"):
            yield _entry("checkpoint tokenizer", path, "the tokenizer of a checkpoint")
        else:
            fp = _json(path / CACHE_FILE).get("fingerprint") or {}
            docs = fp.get("training_documents") or {}
            names = [s.get("name", "?") for s in docs.get("data.sources", [])]
            built = f"{_names(names)}, vocab {fp.get('tokenizer.vocab_size', '?')}"
            yield _entry("tokenizer", path, built if fp else f"no readable {CACHE_FILE}")


def _entry(kind: str, path: Path, built_from: str) -> Entry:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return Entry(kind, path, size, path.stat().st_mtime, built_from)


def _names(names: list[str]) -> str:
    shown = ", ".join("/".join(Path(n).parts[-2:]) or n for n in names[:2])  # dir/file
    return shown + (f" and {len(names) - 2} more" if len(names) > 2 else "") or "no sources"


def _json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
