"""`{path: ..., span: [a, b]}`: the part of a text file between fractions a and b of its bytes.

nanoGPT's split of one file (the first 90% for training, the last 10% held out) without
copying the file: `data.sources=[{path: x.txt, span: [0, 0.9]}]` and
`data.val_sources=[{path: x.txt, span: [0.9, 1]}]`. A cut at byte int(f * size) moves forward
to the next UTF-8 character start, so the spans [a, b] and [b, c] of one file share no byte
and miss none (on ASCII text the cut is nanoGPT's `data[:int(n * 0.9)]`). Only uncompressed
text files have byte offsets to cut at; any other file is refused.

`data.shard` reads a piece of a large file with the same reader: `cut` is the piece's
bytes [a, b) (`packlm.data.store.sources.cuts` puts a and b between records).
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from packlm.data.store.sources.document import SourceError
from packlm.data.store.sources.formats import Format, open_stream
from packlm.data.store.sources.remote import RemoteFile


class SpanReader:
    """A binary file object reading bytes [start, end) of `path`: the span's (fractions of
    the file, None: all of it), or `cut`'s (byte offsets) where given."""

    def __init__(
        self, path: Path | RemoteFile, span: tuple[float, float] | None = None,
        cut: tuple[int, int] | None = None,
    ):  # fmt: skip
        self._f = open_stream(path, None)  # closed by close()
        self.size = size = self._f.seek(0, 2)
        self.start, self.end = (self._cut(int(f * size), size) for f in span or (0, 1))
        if cut is not None:
            self.start, self.end = cut
        self._f.seek(self.start)

    def _cut(self, offset: int, size: int) -> int:
        """`offset` moved forward past UTF-8 continuation bytes (0b10xxxxxx)."""
        self._f.seek(offset)
        for byte in self._f.read(3):
            if byte & 0xC0 != 0x80:
                break
            offset += 1
        return min(offset, size)

    def read(self, size: int = -1) -> bytes:
        left = self.end - self._f.tell()
        return self._f.read(left if size < 0 else min(size, left)) if left > 0 else b""

    def readline(self) -> bytes:
        left = self.end - self._f.tell()
        return self._f.readline(left) if left > 0 else b""

    def __iter__(self):
        """Lines, as a binary file gives them (the last one may lack its newline)."""
        while line := self.readline():
            yield line

    def seen_size(self) -> int:
        """The file's size at opening if the span was read to its end, else less (the file
        shrank while it was read): what `iter_documents` compares with the listing."""
        return self.size if self._f.tell() >= self.end else self._f.tell()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> SpanReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_span(
    path: Path | RemoteFile,
    fmt: Format,
    span: tuple[float, float] | None,
    cut: tuple[int, int] | None = None,
) -> BinaryIO:
    """A reader of the span of an uncompressed text file (SourceError for any other file),
    or of the bytes `cut` of a span or file (`sources.cuts` chose them)."""
    if span is not None and (fmt.kind != "text" or fmt.compression is not None):
        raise SourceError(
            f"{path}: span={list(span)} cuts a file at byte offsets, so it needs an uncompressed "
            f"text file; this one is {fmt.describe()}"
        )
    return SpanReader(path, span, cut)  # type: ignore[return-value]
