"""A `data.sources` entry: a path, glob or "default", or a mapping with these keys.

The data path reads its path and weight through `source_path` and `source_weight`, a
mixture's share and name through `source_share` and `source_name` (`packlm.config.mixture`);
`check_source_entry` is its validation, naming the entry's key (`data.sources[2].weight`).
`source_tag_names` is each source's one name in every TensorBoard tag and table.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from packlm.errors import ConfigError

SOURCE_KEYS = ("path", "weight", "share", "name", "include", "exclude", "span", "chat")
CHAT_FORMS = ("auto", "messages", "sharegpt", "alpaca", "prompt_completion")
"""{path, chat: form}: each record is a conversation (`packlm.data.store.sources.conversations`)."""


def source_chat(entry: Any) -> str | None:
    """The conversation form of a source entry ({path, chat: auto}); None: text documents."""
    if hasattr(entry, "get") and entry.get("chat") is not None:
        return str(entry.get("chat"))
    return None


def source_share(entry: Any) -> float | None:
    """The mixture share of a source entry ({path, share}); None without one."""
    if hasattr(entry, "get") and entry.get("share") is not None:
        return float(entry.get("share"))
    return None


def source_name(entry: Any) -> str:
    """A source's name in a mixture: its `name`, else its path's stem (data/web.jsonl.zst ->
    web, code/ -> code), for a glob the folder it starts in (web/*.jsonl.zst -> web)."""
    if hasattr(entry, "get") and entry.get("name"):
        return str(entry.get("name"))
    parts = PurePosixPath(source_path(entry)).parts
    plain = [i for i, p in enumerate(parts) if not set("*?[").intersection(p)]
    if not plain:
        return source_path(entry)
    last = parts[plain[-1]]
    if plain[-1] < len(parts) - 1:  # a glob below it: the folder's name
        return last
    return last.split(".", 1)[0] or last


def source_tag_names(entries: Any) -> list[str]:
    """Each source's name in TensorBoard tags (`Loss/train_by_source/<name>`, `Mixture/<name>`,
    `data/source/<name>` ...): its `source_name`, with `/` and whitespace as `_` (a `/` would
    open a tag group of its own). Two sources with one name (a mixture refuses that: its
    schedule names them) are told apart by their entry index: `a/web.jsonl`, `b/web.jsonl`
    -> `web_0`, `web_1`."""
    names = [re.sub(r"[\s/]+", "_", source_name(e)) for e in entries]
    out = [f"{n}_{i}" if names.count(n) > 1 else n for i, n in enumerate(names)]
    while len(set(out)) < len(out):  # a suffixed name met a given one (`web_1` and web, web)
        out = [f"{n}_{i}" if out.count(n) > 1 else n for i, n in enumerate(out)]
    return out


def split_source_names(data: Any, split: str, store_names: list[str]) -> list[str]:
    """The tag names of a split's store sources (`store_names`, in store order: the entries'
    paths): of data.val_sources for an explicit validation split, else of data.sources (the
    hash split shares them); a store that does not match the config (a test's own) by its
    own names."""
    entries = getattr(data, "sources", None) or []
    if split == "val" and getattr(data, "val_sources", None):
        entries = data.val_sources
    if len(entries) != len(store_names):
        entries = store_names
    return source_tag_names(entries)


def source_weight(entry: Any) -> float:
    """The mixing weight of a source entry (1.0 unless given as {path, weight})."""
    if isinstance(entry, dict) or hasattr(entry, "get"):
        return float(entry.get("weight", 1.0))
    return 1.0


def source_path(entry: Any) -> str:
    """The path, glob or "default" of a source entry."""
    if isinstance(entry, str):
        return entry
    return str(entry.get("path"))


def check_source_entry(key: str, entry: Any) -> None:
    if isinstance(entry, str):
        if not entry:
            raise ConfigError(f"{key}: empty path")
        return
    if hasattr(entry, "get") and hasattr(entry, "keys"):
        unknown = set(entry.keys()) - set(SOURCE_KEYS)
        if unknown:
            raise ConfigError(f"{key}: unknown keys {sorted(unknown)}; allowed {list(SOURCE_KEYS)}")
        if not entry.get("path"):
            raise ConfigError(f"{key}.path: missing")
        for patterns in ("include", "exclude"):
            value = entry.get(patterns)
            if value is not None and (
                isinstance(value, str) or not all(isinstance(p, str) for p in value)
            ):
                raise ConfigError(f"{key}.{patterns}={value!r}: a list of glob patterns")
        span = entry.get("span")
        if span is not None and not (
            len(span) == 2
            and all(isinstance(f, (int, float)) and not isinstance(f, bool) for f in span)
            and 0 <= span[0] < span[1] <= 1
        ):
            raise ConfigError(f"{key}.span={span!r}: two fractions [a, b] with 0 <= a < b <= 1")
        weight = entry.get("weight", 1.0)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
            raise ConfigError(f"{key}.weight={weight!r}: must be a positive number")
        share = entry.get("share")
        if share is not None:
            if (
                not isinstance(share, (int, float))
                or isinstance(share, bool)
                or not 0 <= share <= 1
            ):
                raise ConfigError(f"{key}.share={share!r}: a fraction in [0, 1]")
            if entry.get("weight") is not None:
                raise ConfigError(
                    f"{key}: give share (a fraction of the tokens) or weight (copies per "
                    "epoch), not both"
                )
        chat = entry.get("chat")
        if chat is not None and chat not in CHAT_FORMS:
            raise ConfigError(f"{key}.chat={chat!r}: one of {list(CHAT_FORMS)}")
        name = entry.get("name")
        if name is not None and (not isinstance(name, str) or not name or ":" in name):
            raise ConfigError(f"{key}.name={name!r}: a non-empty string without ':'")
        return
    raise ConfigError(f"{key}={entry!r}: expected a path string or {{path: ..., weight: ...}}")
