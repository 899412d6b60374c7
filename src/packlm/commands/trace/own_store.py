"""The store a trace explains must be the one the run trained on.

trace rebuilds the run's store from its saved config; after a source file changed that gave
a new store and the explanation of another plan (exit 0, no notice), and with the sources
moved or deleted a traceback. The run's checkpoint records its store's identity (the plan
signature of its training loader, as a resume compares it), so here:
- the sources still give the run's store: traced as usual (a damaged cached copy is rebuilt,
  the log says why);
- the sources changed: one error naming the changed files (the plan would differ);
- the sources gone but the run's store still cached: traced from that store;
- neither: one line naming the missing path.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from packlm.cache.fingerprint import store_identity
from packlm.config.data import DataConfig
from packlm.data.store.corpus import Corpus
from packlm.data.store.prepared import PAD_TOKEN, STORES_DIR, PreparedData
from packlm.data.store.sources import SourceError
from packlm.data.store.token_store import MANIFEST_FILE, TokenStore
from packlm.errors import ConfigError

log = logging.getLogger(__name__)
SHOWN = 5  # changed files named in the error


def loader_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The training loader's state (`PlanDataLoader.state_dict`) in a checkpoint, or {}."""
    loaders = (((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("state_dict") or {}).get(
        "combined_loader"
    ) or []
    for state in loaders if isinstance(loaders, list) else []:
        if (state or {}).get("plan_signature", {}).get("store"):
            return state
    return {}


def trained_store(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """{documents, tokens, fingerprint} of the run's training store, from its loader state."""
    return loader_state(checkpoint).get("plan_signature", {}).get("store")


def own_store(
    data: DataConfig, tokenizer: Any, cache_dir: Path, expected: dict[str, Any], run: Path
) -> PreparedData | None:
    """The run's own store when the trace must read it directly (None: the usual path will
    find or rebuild that very store); ConfigError when the sources would give another."""
    found = _cached(cache_dir, expected["fingerprint"])
    try:
        corpus = Corpus.from_config(data)
    except SourceError as e:
        if found is None:
            raise ConfigError(
                f"{run}: {e}; and the run's store ({expected['fingerprint']}) is not in "
                f"{cache_dir / STORES_DIR}: nothing left to trace"
            ) from None
        log.info("trace: %s; tracing from the run's cached store %s", e, found)
        return _prepared(found, tokenizer, run)
    if found is not None:
        changed = _changed_files(corpus, found)
        if changed:
            raise ConfigError(_changed_message(run, changed))
        return None  # the usual path opens (and verifies) that very store
    if hasattr(tokenizer, "digest") and _identity_now(corpus, tokenizer) != expected["fingerprint"]:
        raise ConfigError(
            f"{run}: the sources differ from the ones the run trained on (data.sources "
            f"{[s.name for s in corpus.sources]}), and its store is not in "
            f"{cache_dir / STORES_DIR} to name the files: the plan would differ, so trace "
            "explains no step of this run"
        )
    log.info("trace: the run's store is not in %s; rebuilding it from the same sources", cache_dir)
    return None


def _cached(cache_dir: Path, identity: str) -> Path | None:
    """The store entry (`<cache>/stores/<digest>`) whose training store has `identity`."""
    for manifest in sorted((cache_dir / STORES_DIR).glob(f"*/train/{MANIFEST_FILE}")):
        try:
            fingerprint = json.loads(manifest.read_text(encoding="utf-8")).get("fingerprint")
        except (OSError, ValueError):
            continue
        if fingerprint is not None and store_identity(fingerprint) == identity:
            return manifest.parent.parent
    return None


def _changed_files(corpus: Corpus, entry: Path) -> list[str]:
    """What changed in the sources since the store was built ([]: nothing): the files added,
    removed or modified, else (a difference the files do not show) the source entries."""
    manifest = json.loads((entry / "train" / MANIFEST_FILE).read_text(encoding="utf-8"))
    recorded, now_fp = manifest.get("fingerprint") or {}, corpus.fingerprint()
    keys = ("data.sources", "data.val_sources")
    if all(_same(recorded.get(k), now_fp.get(k)) for k in keys):
        return []
    built = (entry / "train" / MANIFEST_FILE).stat().st_mtime_ns
    stored: set[str] = set()
    for split in ("train", "val"):
        ids = (entry / split / "doc_ids.txt").read_text(encoding="utf-8").split("\n")[:-1]
        stored |= {_path_of(i) for i in ids}
    now = {
        path: mtime
        for s in (*corpus.sources, *(corpus.val_sources or []))
        for path, _, mtime in s.stats
    }
    # a local file's mtime_ns says when it changed; an object's version (a str) says not when
    changed = [f"{p} (new)" for p in sorted(set(now) - stored) if _after(now[p], built)]
    changed += [
        f"{p} (modified)" for p in sorted(set(now) & stored) if _after(now[p], built, False)
    ]
    changed += [f"{p} (gone)" for p in sorted(stored - set(now))]
    return changed or [f"the listing of data.sources {[s.name for s in corpus.sources]}"]


def _after(mtime: int | str, built: int, unknown: bool = True) -> bool:
    """Was the file modified after the store was built (`unknown` for an object's version)?"""
    return unknown if isinstance(mtime, str) else mtime > built


def _path_of(doc_id: str) -> str:
    """The file of a document id (`source:path[@span][:record]`)."""
    from packlm.data.store.sources.document import parse_doc_id

    return (parse_doc_id(doc_id)["path"] or "").split("@", 1)[0]


def _changed_message(run: Path, changed: list[str]) -> str:
    more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
    return (
        f"{run}: the run's sources changed since it trained: {', '.join(changed[:SHOWN])}{more}; "
        "the plan would differ, so trace explains no step of this run (restore the files, or "
        "trace a run of the current files)"
    )


def _identity_now(corpus: Corpus, tokenizer: Any) -> str:
    ids = tokenizer.special_token_ids
    fingerprint = {
        **corpus.fingerprint(),
        "tokenizer": tokenizer.digest(),
        "eos_id": int(ids[tokenizer.special_tokens[0]]),
        "pad_id": int(ids[PAD_TOKEN]),
    }
    return store_identity(json.loads(json.dumps(fingerprint, default=str)))


def _prepared(entry: Path, tokenizer: Any, run: Path) -> PreparedData:
    """The cached store itself (its sources gone), checked as a cache hit is."""
    from packlm.data.store.verify import verify_checksums

    train, val = TokenStore.open(entry / "train"), TokenStore.open(entry / "val")
    problem = next(filter(None, (verify_checksums(s.path, s.manifest) for s in (train, val))), None)
    if problem:
        raise ConfigError(
            f"{run}: its sources are gone and its cached store is damaged ({problem})"
        )
    return PreparedData(tokenizer, entry, train.path, val.path, train.manifest, val.manifest)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
