"""Sources -> documents: what `data.sources` entries become, each byte accounted for.

1. `entries.py`: an entry (default, a path, a glob, a directory with include/exclude, a
   `save_to_disk` folder, {path, weight}) -> a `Source` and its files, resolved before any
   reading (a missing path fails at once); `remote.py`: an fsspec URL (s3://, gs://, hf://,
   https://) listed and streamed through fsspec, objects identified by version and size;
   `span.py`: {path, span: [a, b]}, a byte range of a text file (nanoGPT's 90/10 split of one
   file); `cuts.py`: where data.shard may cut a file between records, so that a shard reads a
   piece of it, numbered as in the whole file.
2. `formats.py`: a file's format from its first bytes (gzip, bz2, xz, zstd; Parquet, Arrow,
   Feather; binary signatures) and its name (.jsonl / .ndjson / .json lines, any case).
3. `text.py`: text and JSON-lines readers: streamed, newlines normalised, split on
   `data.separator`, invalid UTF-8 by `data.encoding_errors`.
4. `tables.py`: Parquet / Arrow / save_to_disk rows -> documents (pyarrow, an extra).
5. `conversations.py`: a {path, chat: form} entry's records -> one conversation each
   (messages, ShareGPT, Alpaca, prompt/completion), bad records counted and named.
6. `iter_documents` (here): every document of every source in order; what is dropped
   (empty, invalid, binary files of a walk, special files) is counted in `ReadCounts`.
   After each file it checks that the file is still what the listing recorded (size and
   mtime, or an object's version, and every byte of it read): the fingerprint says what was read, or it is an error.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from packlm.data.store.sources.conversations import chat_documents
from packlm.data.store.sources.cuts import file_cuts
from packlm.data.store.sources.document import (
    WHOLE,
    Document,
    ReadCounts,
    ReadOptions,
    SourceError,
)
from packlm.data.store.sources.entries import DEFAULT, Source, file_stat, resolve_sources
from packlm.data.store.sources.formats import detect, open_stream
from packlm.data.store.sources.remote import RemoteFile
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
        _count_left_out(source, counts)
        read = counts.files_read.setdefault(source.index, [])
        for k, (path, listed) in enumerate(zip(source.files, source.stats, strict=True)):
            for doc in _documents_of(source, k, path, listed, options, counts):
                if doc.text:
                    yield doc
                else:
                    counts.empty += 1
            read.append(listed)


def _count_left_out(source: Source, counts: ReadCounts) -> None:
    """What the source's walk left out (`walk.py`), counted, and named in the manifest."""
    for reason, names in source.skipped.items():
        if reason == "special_files":
            counts.skipped_special += len(names)
        else:
            counts.left_out.setdefault(reason, []).extend(names)


def _documents_of(
    source: Source, k: int, path: Path | RemoteFile, listed: tuple[str, int, int | str],
    options: ReadOptions,
    counts: ReadCounts,
) -> Iterator[Document]:  # fmt: skip
    """The documents of file k of the source (of its piece, for a data.shard); then
    `_check_unchanged` (every byte of an uncompressed file, or its span or piece, read)."""
    if source.root is not None:  # the embedded corpus: each file is one text document
        prefix = f"{source.index}:default/{path.relative_to(source.root).as_posix()}"
        with open_stream(path, None) as f:
            yield from text_documents(f, path, prefix, source.index, None, options, counts, False)
            _check_unchanged(path, listed, f.tell())
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
        _check_unchanged(path, listed, None)
        return
    cut = source.cut_of(k)
    if source.chat is not None:
        yield from chat_documents(source, path, fmt, prefix, cut, options, counts)
        _check_unchanged(path, listed, None)
        return
    if fmt.kind in ("parquet", "arrow"):
        yield from table_documents(path, fmt, prefix, source.index, options, counts, cut)
        _check_unchanged(path, listed, None)
        return
    if source.span is not None or cut is not None:
        piece = WHOLE if cut is None else file_cuts(
            path, fmt, options, source.span, listed[1]).piece_start(*cut)  # fmt: skip
        with open_span(path, fmt, source.span, cut) as f:
            if fmt.kind == "jsonl":
                yield from jsonl_documents(
                    f, path, prefix, source.index, options, counts, source.explicit, piece
                )
            else:
                if source.span is not None:
                    prefix = f"{prefix}@{source.span[0]}-{source.span[1]}"
                yield from text_documents(
                    f, path, prefix, source.index, options.separator, options, counts,
                    source.explicit, piece,
                )  # fmt: skip
            _check_unchanged(path, listed, f.seen_size())
        return
    with open_stream(path, fmt.compression) as f:
        if fmt.kind == "jsonl":
            yield from jsonl_documents(
                f, path, prefix, source.index, options, counts, source.explicit
            )
        else:
            yield from text_documents(
                f, path, prefix, source.index, options.separator, options, counts, source.explicit
            )
        _check_unchanged(path, listed, f.tell() if fmt.compression is None else None)


def _check_unchanged(
    path: Path | RemoteFile, listed: tuple[str, int, int | str], read: int | None
) -> None:
    """The file still has the size and mtime the listing recorded (what every fingerprint
    holds), and `read` (bytes read to its end; None for a compressed or table file) is that
    size: else the documents came from another file than the one the fingerprint names."""
    _, size, mtime = listed
    _, now_size, now_mtime = file_stat(path)
    if (now_size, now_mtime) == (size, mtime) and read in (None, size):
        return
    got = "" if read is None else f", {read:,} bytes read"
    if isinstance(path, RemoteFile):
        raise SourceError(
            f"{path}: changed while it was read ({size:,} bytes, {mtime} when the sources were "
            f"listed{got}; now {now_size:,} bytes, {now_mtime}); nothing was cached from it: "
            "run again once it no longer changes"
        )
    raise SourceError(
        f"{path}: changed while it was read ({size:,} bytes, modified {_when(mtime)} when the "
        f"sources were listed{got}; now {now_size:,} bytes, modified {_when(now_mtime)}); "
        "nothing was cached from it: run again once it no longer changes"
    )


def _when(mtime_ns: int) -> str:
    seconds, ns = divmod(mtime_ns, 10**9)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{ns:09d} UTC"
