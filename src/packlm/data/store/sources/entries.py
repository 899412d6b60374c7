"""`data.sources` entries -> `Source`s with their files, resolved once, before any reading.

An entry is "default" (the embedded stdlib corpus), a file, a directory (every file under
it but hidden ones), a glob, a `datasets.save_to_disk` folder, an fsspec URL (an object, a
prefix or a glob in object storage: `remote.py`), or a mapping
{path, weight, include, exclude, span}: include/exclude are glob patterns on the path relative to
the entry (`*.py`, `**/tests/**`). An existing path is read as that path even when its name
holds glob characters (`notes[1].txt`). Directory walks follow file symlinks, skip hidden
entries, and count what is not a regular file (FIFOs, sockets) instead of blocking on it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from packlm.config.sources import source_path, source_weight
from packlm.data.store.default_corpus import default_corpus_files, stdlib_root
from packlm.data.store.sources.document import SourceError
from packlm.data.store.sources.remote import RemoteFile, is_url, list_objects
from packlm.data.store.sources.tables import dataset_folder_files, is_dataset_folder
from packlm.errors import ConfigError

DEFAULT = "default"
_GLOB_CHARS = frozenset("*?[")


@dataclass
class Source:
    """A source entry resolved to its files."""

    name: str
    weight: float
    index: int
    files: list[Path | RemoteFile]
    root: Path | None = None
    """Set for the default corpus: doc ids use paths relative to it."""
    stats: list[tuple[str, int, int | str]] = field(default_factory=list)
    """(absolute path, size, mtime_ns) per file, in reading order; (URL, size, version) per
    object of a URL source."""
    explicit: bool = True
    """One file named by the entry (a binary one is an error) or found by a walk (skipped)."""
    special_files: int = 0
    """Entries of the walk that are not regular files (skipped, counted)."""
    span: tuple[float, float] | None = None
    """{path, span: [a, b]}: only bytes [a, b) of each file, as fractions of its size."""
    cuts: list[tuple[int, int] | None] | None = None
    """Per file, the piece a data.shard reads: bytes [a, b), cut between records by
    `sources.cuts` (a table's row groups or batches starting there); None: the whole file
    (or span)."""
    chat: str | None = None
    """{path, chat: form}: records are conversations (`sources.conversations`); None: text."""

    def cut_of(self, k: int) -> tuple[int, int] | None:
        return None if self.cuts is None else self.cuts[k]

    @property
    def total_bytes(self) -> int:
        """Bytes read: each file's, or its piece's (`cuts`)."""
        total = 0
        for k, (_, size, _) in enumerate(self.stats):
            cut = self.cut_of(k)
            total += size if cut is None else cut[1] - cut[0]
        return total

    def fingerprint(self) -> dict[str, Any]:
        """Name, weight, file count, bytes and a digest of every (path, size, mtime)."""
        return {
            "name": self.name,
            "weight": self.weight,
            **files_fingerprint(self.stats),
            **({"span": list(self.span)} if self.span is not None else {}),
            **({"cuts": [c and list(c) for c in self.cuts]} if self.cuts is not None else {}),
        }


def files_fingerprint(stats: list[tuple[str, int, int | str]]) -> dict[str, Any]:
    """File count, bytes and a digest of every (path, size, mtime_ns): of a source as listed
    (its fingerprint) or as read (the manifest's record, `ReadCounts.files_read`)."""
    return {
        "files": len(stats),
        "bytes": sum(size for _, size, _ in stats),
        "digest": hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:16],
    }


def file_stat(path: Path | RemoteFile) -> tuple[str, int, int | str]:
    """(absolute path, size, mtime_ns), or an object's (URL, size, version): what identifies
    a source file in every fingerprint."""
    if isinstance(path, RemoteFile):
        return path.stat()
    try:
        st = path.stat()
    except OSError as e:
        raise SourceError(f"{path}: cannot read ({e.strerror})") from e
    return str(path.resolve()), st.st_size, st.st_mtime_ns


def resolve_sources(entries: list[Any], key: str = "data.sources") -> list[Source]:
    """Resolve every entry to its sorted files; raise SourceError for a missing path or empty
    glob, ConfigError for a file that two entries read (its documents would count twice)."""
    sources = [_resolve(entry, i, f"{key}[{i}]") for i, entry in enumerate(entries)]
    _check_read_once(sources, entries, key)
    return sources


def _check_read_once(sources: list[Source], entries: list[Any], key: str) -> None:
    """No file read by two entries (overlapping spans of it count as the same bytes): listing
    a source twice doubled its documents without a word; a weight is what gives it more."""
    first: dict[str, list[tuple[int, tuple[float, float]]]] = {}  # path -> (entry, span)
    for source in sources:
        a, b = source.span or (0.0, 1.0)
        shared = []
        for path, _, _ in source.stats:
            earlier = first.setdefault(path, [])
            # not the same entry: a walk's file symlink to a file of that walk is read as listed
            shared += [(j, path) for j, (c, d) in earlier if j != source.index and c < b and a < d]
            earlier.append((source.index, (a, b)))
        if shared:
            (j, path), i = shared[0], source.index
            more = f" (and {len(shared) - 1} more files)" if len(shared) > 1 else ""
            raise ConfigError(
                f"{key}[{j}]={sources[j].name!r} and {key}[{i}]={source.name!r} both read "
                f"{path}{more}: its documents would be counted twice; list each file once (to "
                f"give a source more weight, use {{path: ..., weight: 2}}){_weights(entries, j, i)}"
            )


def _weights(entries: list[Any], *indices: int) -> str:
    w = [source_weight(entries[k]) for k in indices]
    return "" if w == [1.0, 1.0] else f"; here weights {w[0]:g} and {w[1]:g}"


def _resolve(entry: Any, index: int, key: str) -> Source:
    name, weight = source_path(entry), source_weight(entry)
    include, exclude = _patterns(entry, "include"), _patterns(entry, "exclude")
    root, explicit, special = None, False, 0
    path = Path(name)
    if is_url(name):
        files = list_objects(name, key, lambda rel: _wanted(rel, include, exclude))
        if not files:
            raise SourceError(f"{key}={name!r}: no objects there{_filtered(include, exclude)}")
        explicit = len(files) == 1 and files[0].url == name
    elif name == DEFAULT:
        root = stdlib_root()
        files = default_corpus_files(root)
    elif path.is_dir() and is_dataset_folder(path):
        files, explicit = dataset_folder_files(path, key), True
    elif path.is_dir():
        files, special = _walk(path, include, exclude)
        if not files:
            raise SourceError(
                f"{key}={name!r}: the directory holds no files{_filtered(include, exclude)}"
            )
    elif path.exists():  # before globbing: an existing name may hold glob characters
        if not path.is_file():
            raise SourceError(f"{key}={name!r}: not a regular file (a FIFO, socket or device)")
        files, explicit = [path], True
    elif _GLOB_CHARS.intersection(name):
        base = Path(glob.escape(name).split("[*]", 1)[0].split("[?]", 1)[0]).parent
        files, special = [], 0
        for p in sorted(Path(p) for p in glob.glob(name, recursive=True)):
            if p.is_file() and _selected(p, base, include, exclude):
                files.append(p)
            elif p.exists() and not p.is_dir():
                special += 1
        if not files:
            raise SourceError(
                f"{key}={name!r}: the glob matched no files{_filtered(include, exclude)}"
            )
    else:
        raise SourceError(f"{key}={name!r}: no such file or directory (cwd {os.getcwd()})")
    stats = [
        (f.url, f.size, f.version) if isinstance(f, RemoteFile) else file_stat(f) for f in files
    ]
    span = None if isinstance(entry, str) or entry.get("span") is None else entry.get("span")
    span = None if span is None else (float(span[0]), float(span[1]))
    return Source(name, weight, index, files, root, stats, explicit, special, span)


def _walk(directory: Path, include: list[str], exclude: list[str]) -> tuple[list[Path], int]:
    """(regular files under `directory`, sorted; how many other entries were skipped)."""
    files, special = [], 0
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory)
        if any(part.startswith(".") for part in rel.parts) or p.is_dir():
            continue
        try:
            mode = p.stat().st_mode
        except OSError:  # a dangling symlink
            special += 1
            continue
        if not stat.S_ISREG(mode):
            special += 1
        elif _selected(p, directory, include, exclude):
            files.append(p)
    return files, special


def _selected(path: Path, base: Path, include: list[str], exclude: list[str]) -> bool:
    try:
        rel = path.relative_to(base).as_posix()
    except ValueError:
        rel = path.as_posix()
    return _wanted(rel, include, exclude)


def _wanted(rel: str, include: list[str], exclude: list[str]) -> bool:
    return (not include or any(_match(rel, p) for p in include)) and not any(
        _match(rel, p) for p in exclude
    )


def _match(rel: str, pattern: str) -> bool:
    """fnmatch, where a leading `**/` also matches at the top (`**/tests/**` ~ tests/x.py)."""
    return fnmatch(rel, pattern) or (pattern.startswith("**/") and fnmatch(rel, pattern[3:]))


def _patterns(entry: Any, key: str) -> list[str]:
    if isinstance(entry, str):
        return []
    return [str(p) for p in (entry.get(key) or [])]


def _filtered(include: list[str], exclude: list[str]) -> str:
    return f" (include {include}, exclude {exclude})" if include or exclude else ""
