"""Fingerprints of cached artifacts: a digest that names the cache entry, and a readable diff.

A fingerprint is a JSON-able dict whose keys are the config keys or sources it depends on.
The digest names the cache directory, so different configurations (a sweep over vocab
sizes, say) keep their own entries side by side. When the entry for the current
configuration is missing, `describe_change` compares it with the most recent entry in
the cache, so the log says why a rebuild happens ("tokenizer.vocab_size: 4096 -> 512").
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def digest(fingerprint: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over the canonical JSON of the fingerprint."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def latest(pattern_root: Path, pattern: str, key: str) -> dict[str, Any] | None:
    """`key` of the most recently written JSON file matching `pattern` under `pattern_root`
    (an object; a file that is not one, or holds another thing there, is passed over)."""
    candidates = []
    for path in pattern_root.glob(pattern):
        try:
            candidates.append((path.stat().st_mtime_ns, path))
        except OSError:
            continue
    for _, path in sorted(candidates, reverse=True):
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(found, dict) and isinstance(found.get(key), dict):
            return found[key]
    return None


def describe_change(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """What differs between two fingerprints, in words; names each changed key or source."""
    if old is None:
        return "nothing cached yet"
    changes = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list) and _all_sources(a) and _all_sources(b):
            changes.extend(_source_changes(key, a, b))
        elif isinstance(a, dict) and isinstance(b, dict):
            inner = describe_change(a, b)
            changes.append(inner)
        elif key == "tokenizer" and _is_digest(a) and _is_digest(b):
            changes.append(f"a different tokenizer (digest {a[:12]} -> {b[:12]})")
        else:
            changes.append(f"{key}: {_short(a)} -> {_short(b)}")
    return "; ".join(changes) if changes else "nothing (same fingerprint)"


def _all_sources(items: list[Any]) -> bool:
    return all(isinstance(s, dict) and "name" in s and "digest" in s for s in items)


def _source_changes(key: str, old: list[dict], new: list[dict]) -> list[str]:
    if [s["name"] for s in old] != [s["name"] for s in new]:
        return [f"{key}: {[s['name'] for s in old]} -> {[s['name'] for s in new]}"]
    changes = []
    for a, b in zip(old, new, strict=True):
        if a == b:
            continue
        if a["digest"] != b["digest"]:
            how = (
                f"{a['files']} files, {a['bytes']} bytes -> {b['files']} files, {b['bytes']} bytes"
                if (a["files"], a["bytes"]) != (b["files"], b["bytes"])
                else "a file was modified (same sizes, new modification time)"
            )
            changes.append(f"source {b['name']!r} changed ({how})")
    return changes


def _is_digest(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def _short(value: Any) -> str:
    if _is_digest(value):
        return repr(value[:12])  # a sha256: its head names it, as git's short hashes do
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def store_identity(fingerprint: Any) -> str:
    """A store's identity in a plan signature: a digest of its manifest's fingerprint (what
    trace matches a cached store to the run's with; packlm.data.epoch.loader.plan_signature)."""
    identity = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:16]
