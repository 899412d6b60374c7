"""A file's format from its first bytes (and its name where bytes cannot tell), and how to open it.

Compression is recognised by magic bytes whatever the name (gzip, bz2, xz from the standard
library; zstd through the `zstandard` package or Python's own `compression.zstd`); then the
name without the compression suffix says JSON lines (.jsonl / .ndjson / .json, any case)
or text, and the first bytes say Parquet, Arrow / Feather or a binary file (NUL bytes, an
image, an archive, a compiled file). Nothing here reads more than the first block.
An object in storage (`remote.RemoteFile`) opens as a stream of its bytes like a file.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packlm.data.store.sources.document import SourceError
from packlm.data.store.sources.remote import RemoteFile

COMPRESSION_MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bz2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
}
COMPRESSION_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd"}
TABLE_MAGIC = {b"PAR1": "parquet", b"ARROW1": "arrow", b"FEA1": "feather v1"}
BINARY_MAGIC = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a zip archive",
    b"\x7fELF": "an ELF executable",
    b"7z\xbc\xaf": "a 7z archive",
    b"\x93NUMPY": "a numpy array",
}
JSONL_SUFFIXES = {".jsonl", ".ndjson", ".json"}
SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Format:
    """How to read one file: `kind` is text, jsonl, parquet, arrow, or binary."""

    kind: str
    compression: str | None = None
    detail: str = ""
    """For binary files: what it looks like ("a PNG image")."""

    def describe(self) -> str:
        inner = self.detail or self.kind
        return f"{self.compression}-compressed {inner}" if self.compression else inner


def detect(path: Path | RemoteFile) -> Format:
    """The format of `path` from its first bytes (decompressed) and its name."""
    head = _head(path, None)
    compression = next((c for m, c in COMPRESSION_MAGIC.items() if head.startswith(m)), None)
    name = path.name
    if compression:
        suffix = Path(name).suffix.lower()
        if COMPRESSION_SUFFIXES.get(suffix) == compression:
            name = name[: -len(suffix)]
        head = _head(path, compression)
    for magic, kind in TABLE_MAGIC.items():
        if head.startswith(magic):
            return Format("arrow" if kind == "feather v1" else kind, compression, kind)
    if head.startswith(b"\xff\xff\xff\xff"):  # the Arrow IPC stream format
        return Format("arrow", compression, "an Arrow stream")
    for magic, what in BINARY_MAGIC.items():
        if head.startswith(magic):
            return Format("binary", compression, what)
    if b"\x00" in head:  # UTF-16 text has NUL bytes too: it is read as UTF-8 only
        return Format(
            "binary", compression, "binary data (NUL bytes; UTF-16 text needs converting)"
        )
    kind = "jsonl" if Path(name).suffix.lower() in JSONL_SUFFIXES else "text"
    return Format(kind, compression)


def open_stream(path: Path | RemoteFile, compression: str | None) -> BinaryIO:
    """A binary stream of the file's (decompressed) bytes; the caller closes it."""
    if isinstance(path, RemoteFile):
        raw = path.open()  # streamed, retried; a failure is a SourceError already
        return raw if compression is None else _decompressed(path, raw, compression)
    try:
        raw = open(path, "rb")  # noqa: SIM115 (returned to the caller's `with`)
    except OSError as e:
        raise SourceError(f"{path}: cannot read ({e.strerror})") from e
    return raw if compression is None else _decompressed(path, raw, compression)


def _decompressed(path: Path | RemoteFile, raw: BinaryIO, compression: str) -> BinaryIO:
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw)
    if compression == "bz2":
        return bz2.BZ2File(raw)
    if compression == "xz":
        return lzma.LZMAFile(raw)
    return _zstd_reader(path, raw)


def _zstd_reader(path: Path | RemoteFile, raw: BinaryIO) -> BinaryIO:
    try:
        from compression import zstd  # Python >= 3.14

        return zstd.ZstdFile(raw)
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        raw.close()
        raise SourceError(
            f"{path}: zstd-compressed; reading it needs the zstandard package "
            '(pip install "packlm[zstd]")'
        ) from None
    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))


def _head(path: Path | RemoteFile, compression: str | None) -> bytes:
    try:
        with open_stream(path, compression) as f:
            return f.read(SNIFF_BYTES)
    except SourceError:
        raise
    except (OSError, EOFError, lzma.LZMAError) as e:  # a truncated or corrupt archive
        what = f"{compression}-compressed file" if compression else "file"
        raise SourceError(f"{path}: cannot read the {what} ({e})") from e
