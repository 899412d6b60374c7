"""`data.sources` entries -> `Source`s with their files, resolved once, before any reading.

An entry is "default" (the embedded stdlib corpus), a file, a directory (every file under
it but hidden ones), a glob, a `datasets.save_to_disk` folder, an fsspec URL (an object, a
prefix or a glob in object storage: `remote.py`), or a mapping
{path, weight, include, exclude, span}: include/exclude are glob patterns on the path relative to
the entry (`*.py`, `**/tests/**`). An existing path is read as that path even when its name
holds glob characters (`notes[1].txt`). Directory walks and globs follow symbolic links and
read each real file once (`walk.py`, docs/links.md): what they leave out (special files,
broken links, second names of a file, folders reached again) is counted and named.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from packlm.config.sources import source_path, source_weight
from packlm.data.store.default_corpus import default_corpus_files, stdlib_root
from packlm.data.store.sources.document import SourceError
from packlm.data.store.sources.remote import RemoteFile, is_url, list_objects
from packlm.data.store.sources.tables import dataset_folder_files, is_dataset_folder
from packlm.data.store.sources.walk import EVERYTHING, SKIP_REASONS, Listing, split_glob, walk
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
    skipped: dict[str, list[str]] = field(default_factory=dict)
    """What the walk or glob left out, by reason (`walk.SKIP_REASONS`) -> names: counted in
    the data summary, named in the log."""
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
    first: dict[Any, list[tuple[int, tuple[float, float], str]]] = {}  # real file -> entries
    for source in sources:
        a, b = source.span or (0.0, 1.0)
        shared = []
        for path, _, _ in source.stats:
            earlier = first.setdefault(_real_file(path), [])
            # a walk lists each real file once (walk.py)
            shared += [(j, path, p) for j, (c, d), p in earlier if j != source.index and c < b and a < d]  # fmt: skip
            earlier.append((source.index, (a, b), path))
        if shared:
            (j, path, was), i = shared[0], source.index
            more = f" (and {len(shared) - 1} more files)" if len(shared) > 1 else ""
            same = "" if was == path else f" (a hard link of {was})"
            raise ConfigError(
                f"{key}[{j}]={sources[j].name!r} and {key}[{i}]={source.name!r} both read "
                f"{path}{same}{more}: its documents would be counted twice; list each file once (to "
                f"give a source more weight, use {{path: ..., weight: 2}}){_weights(entries, j, i)}"
            )


def _real_file(path: str) -> tuple[int, int] | str:
    """A local file's (device, inode): its hard links and symlinks are one file; an object's
    URL."""
    if is_url(path):
        return path
    try:
        st = os.stat(path)
    except OSError:
        return path
    return (st.st_dev, st.st_ino) if st.st_ino else path


def _weights(entries: list[Any], *indices: int) -> str:
    w = [source_weight(entries[k]) for k in indices]
    return "" if w == [1.0, 1.0] else f"; here weights {w[0]:g} and {w[1]:g}"


def _resolve(entry: Any, index: int, key: str) -> Source:
    name, weight = source_path(entry), source_weight(entry)
    include, exclude = _patterns(entry, "include"), _patterns(entry, "exclude")
    root, explicit, skipped = None, False, {}
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
        listing = walk(path, EVERYTHING, lambda rel: _wanted(rel, include, exclude))
        files, skipped = listing.files, listing.skipped
        if not files:
            raise SourceError(
                f"{key}={name!r}: the directory holds no files{_filtered(include, exclude)}"
                f"{_left_out(listing)}"
            )
    elif path.exists():  # before globbing: an existing name may hold glob characters
        if not path.is_file():
            raise SourceError(f"{key}={name!r}: not a regular file (a FIFO, socket or device)")
        files, explicit = [path], True
    elif _GLOB_CHARS.intersection(name):
        top, pattern = split_glob(name)
        listing = Listing()
        if top.is_dir():
            listing = walk(top, pattern, lambda rel: _wanted(rel, include, exclude))
        files, skipped = listing.files, listing.skipped
        if not files:
            raise SourceError(
                f"{key}={name!r}: the glob matched no files{_filtered(include, exclude)}"
                f"{_left_out(listing)}"
            )
    else:
        raise SourceError(f"{key}={name!r}: no such file or directory (cwd {os.getcwd()})")
    stats = [
        (f.url, f.size, f.version) if isinstance(f, RemoteFile) else file_stat(f) for f in files
    ]
    span = None if isinstance(entry, str) or entry.get("span") is None else entry.get("span")
    span = None if span is None else (float(span[0]), float(span[1]))
    return Source(name, weight, index, files, root, stats, explicit, skipped, span)


def _left_out(listing: Listing) -> str:
    """` (left out: 2 broken links: a.txt -> gone.txt, ...)`, or "" when nothing was."""
    if not listing.skipped:
        return ""
    said = [
        f"{len(names)} {reason.replace('_', ' ')}: {', '.join(names[:3])}"
        + (", ..." if len(names) > 3 else "")
        for reason in SKIP_REASONS
        if (names := listing.skipped.get(reason))
    ]
    return f" (left out: {'; '.join(said)})"


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
