"""Text sources -> a stream of `Document(text, doc_id, source_index)`.

A source entry of `data.sources` is "default" (the embedded stdlib corpus), a file, a
directory (every file under it but hidden ones), a glob, or a mapping {path, weight}. A
`.jsonl` file gives one document per record (`data.text_field`); any other file is one
document, or several when `data.separator` is set (the default corpus ignores the
separator: each stdlib module is one document). Files are read in sorted order and
streamed, so the same sources always give the same documents in the same order, in
bounded memory.

Every error names its culprit (the config key, the path, or path:line) because a bad
corpus is usually found minutes into a run, far from the override that caused it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from packlm.data.config import source_path, source_weight
from packlm.data.store.default_corpus import default_corpus_files, stdlib_root

DEFAULT = "default"
_BLOCK = 1 << 20  # read size when splitting a text file on the separator
_GLOB_CHARS = frozenset("*?[")


class Document(NamedTuple):
    text: str
    doc_id: str
    """Stable across runs and machines: "<source index>:<path>[:<record line or split index>]"."""
    source_index: int
    """Position of the document's entry in data.sources (or data.val_sources)."""


class SourceError(ValueError):
    """A source that cannot become documents; the message starts with the culprit."""


@dataclass
class ReadOptions:
    """The `data.*` options that decide which documents a source gives."""

    text_field: str = "text"
    separator: str | None = None
    encoding_errors: str = "strict"

    @classmethod
    def from_config(cls, data: Any) -> ReadOptions:
        return cls(data.text_field, data.separator, data.encoding_errors)


@dataclass
class ReadCounts:
    """What reading dropped or changed, for the manifest."""

    empty: int = 0
    """Documents with no text (an empty file, two separators in a row)."""
    skipped_invalid_utf8: int = 0
    """Documents dropped under encoding_errors=skip."""
    replaced_invalid_utf8: int = 0
    """Documents kept with U+FFFD under encoding_errors=replace."""


@dataclass
class Source:
    """A source entry resolved to its files."""

    name: str
    weight: float
    index: int
    files: list[Path]
    root: Path | None = None
    """Set for the default corpus: doc ids use paths relative to it."""
    stats: list[tuple[str, int, int]] = field(default_factory=list)
    """(absolute path, size, mtime_ns) per file, in reading order."""

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.stats)

    def fingerprint(self) -> dict[str, Any]:
        """Name, weight, file count, bytes and a digest of every (path, size, mtime)."""
        digest = hashlib.sha256(json.dumps(self.stats).encode()).hexdigest()[:16]
        return {
            "name": self.name,
            "weight": self.weight,
            "files": len(self.stats),
            "bytes": self.total_bytes,
            "digest": digest,
        }


def resolve_sources(entries: list[Any], key: str = "data.sources") -> list[Source]:
    """Resolve every entry to its sorted files; raise SourceError for a missing path or empty glob."""
    return [_resolve(entry, i, f"{key}[{i}]") for i, entry in enumerate(entries)]


def _resolve(entry: Any, index: int, key: str) -> Source:
    name, weight = source_path(entry), source_weight(entry)
    root = None
    if name == DEFAULT:
        root = stdlib_root()
        files = default_corpus_files(root)
    elif _GLOB_CHARS.intersection(name):
        files = sorted(Path(p) for p in glob.glob(name, recursive=True) if Path(p).is_file())
        if not files:
            raise SourceError(f"{key}={name!r}: the glob matched no files")
    elif Path(name).is_dir():
        files = sorted(p for p in Path(name).rglob("*") if p.is_file() and not _hidden(p, name))
        if not files:
            raise SourceError(f"{key}={name!r}: the directory holds no files")
    elif Path(name).is_file():
        files = [Path(name)]
    else:
        raise SourceError(f"{key}={name!r}: no such file or directory (cwd {os.getcwd()})")
    stats = []
    for path in files:
        try:
            st = path.stat()
        except OSError as e:
            raise SourceError(f"{path}: cannot read ({e.strerror})") from e
        stats.append((str(path.resolve()), st.st_size, st.st_mtime_ns))
    return Source(name, weight, index, files, root, stats)


def _hidden(path: Path, root: str) -> bool:
    """Under a hidden directory or hidden itself (.git, .DS_Store): not part of a corpus."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def iter_documents(
    sources: list[Source], options: ReadOptions, counts: ReadCounts
) -> Iterator[Document]:
    """Every non-empty document of every source, in order; drops are tallied in `counts`."""
    for source in sources:
        for path in source.files:
            for doc in _documents_of(source, path, options, counts):
                if doc.text:
                    yield doc
                else:
                    counts.empty += 1


def _documents_of(
    source: Source, path: Path, options: ReadOptions, counts: ReadCounts
) -> Iterator[Document]:
    if source.root is not None:  # the embedded corpus: each file is one document
        prefix = f"{source.index}:default/{path.relative_to(source.root).as_posix()}"
        return _file_documents(path, prefix, source.index, None, options, counts)
    prefix = f"{source.index}:{path.as_posix()}"
    if path.suffix == ".jsonl":
        return _jsonl_documents(path, prefix, source.index, options, counts)
    return _file_documents(path, prefix, source.index, options.separator, options, counts)


def _open(path: Path):
    try:
        return open(path, "rb")  # noqa: SIM115 (the caller's `with` closes it)
    except OSError as e:
        raise SourceError(f"{path}: cannot read ({e.strerror})") from e


def _file_documents(
    path: Path,
    prefix: str,
    index: int,
    separator: str | None,
    options: ReadOptions,
    counts: ReadCounts,
) -> Iterator[Document]:
    with _open(path) as f:
        if separator is None:
            text = _decode(_read(f, path), path, 0, options.encoding_errors, counts)
            if text is not None:
                yield Document(text, prefix, index)
            return
        for k, (offset, data) in enumerate(_split_stream(f, path, separator.encode("utf-8"))):
            text = _decode(data, path, offset, options.encoding_errors, counts)
            if text is not None:
                yield Document(text, f"{prefix}:{k}", index)


def _split_stream(f, path: Path, sep: bytes) -> Iterator[tuple[int, bytes]]:
    """(byte offset, piece) of a file split on `sep`, reading one block at a time."""
    buf, start, search = bytearray(), 0, 0
    while block := _read(f, path, _BLOCK):
        buf += block
        pos = 0
        while (hit := buf.find(sep, search)) >= 0:
            yield start, bytes(buf[pos:hit])
            start += hit - pos + len(sep)
            pos = search = hit + len(sep)
        del buf[:pos]
        search = max(0, len(buf) - len(sep) + 1)
    yield start, bytes(buf)


def _jsonl_documents(
    path: Path, prefix: str, index: int, options: ReadOptions, counts: ReadCounts
) -> Iterator[Document]:
    field_name = options.text_field
    with _open(path) as f:
        offset = 0
        for line_no, raw in enumerate(_lines(f, path), start=1):
            where = f"{path}:{line_no}"
            line_offset, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            line = _decode(raw, where, line_offset, options.encoding_errors, counts)
            if line is None:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise SourceError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from e
            if not isinstance(record, dict) or field_name not in record:
                raise SourceError(
                    f"{where}: no field {field_name!r} (data.text_field) in this record"
                )
            text = record[field_name]
            if not isinstance(text, str):
                raise SourceError(
                    f"{where}: field {field_name!r} is {type(text).__name__}, not a string"
                )
            text = _check_surrogates(text, where, options.encoding_errors, counts)
            if text is not None:
                yield Document(text, f"{prefix}:{line_no}", index)


def _read(f, path: Path, size: int = -1) -> bytes:
    try:
        return f.read(size)
    except OSError as e:
        raise SourceError(f"{path}: cannot read ({e.strerror})") from e


def _lines(f, path: Path) -> Iterator[bytes]:
    try:
        yield from f
    except OSError as e:
        raise SourceError(f"{path}: cannot read ({e.strerror})") from e


def _decode(data: bytes, where: Any, offset: int, policy: str, counts: ReadCounts) -> str | None:
    """UTF-8 text of `data` under the encoding_errors policy; None means "skip this document"."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        return _invalid_text(
            policy, counts, e,
            f"{where}: not valid UTF-8 at byte offset {offset + e.start} ({e.reason}); "
            "set data.encoding_errors=replace or skip to accept such files",
            lambda: data.decode("utf-8", errors="replace"),
        )  # fmt: skip


def _check_surrogates(text: str, where: str, policy: str, counts: ReadCounts) -> str | None:
    """A JSON string may hold an unpaired surrogate escape, which no UTF-8 tokenizer can take."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError as e:
        return _invalid_text(
            policy, counts, e,
            f"{where}: unpaired surrogate escape at character {e.start} of the text; "
            "set data.encoding_errors=replace or skip to accept it",
            lambda: text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"),
        )  # fmt: skip


def _invalid_text(
    policy: str, counts: ReadCounts, error: Exception, message: str, replaced: Callable[[], str]
) -> str | None:
    """The encoding_errors policy on one document that is not valid text: raise (strict), None
    (skip) or the text with U+FFFD (replace), counted."""
    if policy == "strict":
        raise SourceError(message) from error
    if policy == "skip":
        counts.skipped_invalid_utf8 += 1
        return None
    counts.replaced_invalid_utf8 += 1
    return replaced()
