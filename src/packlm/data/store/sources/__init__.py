"""Sources -> documents: what `data.sources` entries become, each byte accounted for.

1. `entries.py`: an entry (default, a path, a glob, a directory with include/exclude, a
   `save_to_disk` folder, {path, weight}) -> a `Source` and its files, resolved before any
   reading (a missing path fails at once); `span.py`: {path, span: [a, b]}, a byte range of
   a text file (nanoGPT's 90/10 split of one file).
2. `formats.py`: a file's format from its first bytes (gzip, bz2, xz, zstd; Parquet, Arrow,
   Feather; binary signatures) and its name (.jsonl / .ndjson / .json lines, any case).
3. `text.py`: text and JSON-lines readers: streamed, newlines normalised, split on
   `data.separator`, invalid UTF-8 by `data.encoding_errors`.
4. `tables.py`: Parquet / Arrow / save_to_disk rows -> documents (pyarrow, an extra).
5. `iter_documents` (here): every document of every source in order; what is dropped
   (empty, invalid, binary files of a walk, special files) is counted in `ReadCounts`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from packlm.data.store.sources.document import Document, ReadCounts, ReadOptions, SourceError
from packlm.data.store.sources.entries import DEFAULT, Source, resolve_sources
from packlm.data.store.sources.formats import detect, open_stream
from packlm.data.store.sources.span import open_span
from packlm.data.store.sources.tables import table_documents
from packlm.data.store.sources.text import jsonl_documents, text_documents

__all__ = [
    "DEFAULT",
    "Document",
    "ReadCounts",
    "ReadOptions",
    "Source",
    "SourceError",
    "iter_documents",
    "resolve_sources",
]


def iter_documents(
    sources: list[Source], options: ReadOptions, counts: ReadCounts
) -> Iterator[Document]:
    """Every non-empty document of every source, in order; drops are tallied in `counts`."""
    for source in sources:
        counts.skipped_special += source.special_files
        for path in source.files:
            for doc in _documents_of(source, path, options, counts):
                if doc.text:
                    yield doc
                else:
                    counts.empty += 1


def _documents_of(
    source: Source, path: Path, options: ReadOptions, counts: ReadCounts
) -> Iterator[Document]:
    if source.root is not None:  # the embedded corpus: each file is one text document
        prefix = f"{source.index}:default/{path.relative_to(source.root).as_posix()}"
        with open_stream(path, None) as f:
            yield from text_documents(f, path, prefix, source.index, None, options, counts)
        return
    prefix = f"{source.index}:{path.as_posix()}"
    fmt = detect(path)
    if fmt.kind == "binary":
        if source.explicit:
            raise SourceError(
                f"{path}: {fmt.describe()}, not text; give text, JSONL, Parquet or Arrow files "
                "(a directory or glob skips binary files and counts them)"
            )
        counts.skipped_binary += 1
        return
    if fmt.kind in ("parquet", "arrow"):
        yield from table_documents(path, fmt, prefix, source.index, options, counts)
        return
    if source.span is not None:
        with open_span(path, fmt, source.span) as f:
            yield from text_documents(
                f, path, f"{prefix}@{source.span[0]}-{source.span[1]}", source.index,
                options.separator, options, counts,
            )  # fmt: skip
        return
    with open_stream(path, fmt.compression) as f:
        if fmt.kind == "jsonl":
            yield from jsonl_documents(f, path, prefix, source.index, options, counts)
        else:
            yield from text_documents(
                f, path, prefix, source.index, options.separator, options, counts
            )
