"""Where `data.shard` may cut one source file between records, and what comes before a cut.

With fewer files than shards (one 40 GB JSONL), a file is read in pieces, each cut between
two records, so every record is read whole by exactly one shard:
- JSON lines: after a newline;
- text split on `data.separator`: after a separator that the whole file's split finds
  (the leftmost match after newline normalisation: a cut never starts a match that an
  earlier, overlapping one would take), so each piece splits into the whole file's documents;
- Parquet: between row groups; an Arrow / Feather v2 file: between record batches.
Anything else is read in one piece, and `FileCuts.whole` says why: a compressed file (one
stream, readable only from its start), text without data.separator (one document), an
Arrow stream or Feather v1 file (batches found only by reading it all).

A cut is found from a byte target by seeking there and scanning forward to the next
boundary (a block or two, unless a record is longer), so every shard process finds the same
cuts alone. `piece_start` gives the whole file's numbering at a cut (records before it,
normalized byte offset) by reading the bytes before it, without decoding them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from packlm.data.store.sources.document import Piece, ReadCounts, ReadOptions
from packlm.data.store.sources.formats import Format
from packlm.data.store.sources.span import SpanReader
from packlm.data.store.sources.tables import table_units
from packlm.data.store.sources.text import read_blocks, split_pieces

BLOCK = 1 << 20  # bytes read at a time while scanning for a boundary


@dataclass
class FileCuts:
    """The cut points of one file, as byte offsets: [lo, hi) is the span of a text file, else
    the whole file."""

    path: Path
    fmt: Format
    lo: int
    hi: int
    weight: int
    """Its bytes in the balance between shards."""
    whole: str | None = None
    """Why it cannot be cut (None: it can)."""
    separator: bytes | None = None
    normalize: bool = True
    span: tuple[float, float] | None = None
    table_starts: np.ndarray | None = field(default=None, repr=False)
    """int64 [units]: where each row group / batch starts (`tables.table_units`)."""

    def snap(self, at: int) -> int:
        """The first cut point at or after byte `at` of its `weight` (hi: none before the end)."""
        if at <= 0:
            return self.lo
        if self.whole is not None:
            return self.hi
        if self.table_starts is not None:
            later = self.table_starts[self.table_starts >= at]
            return int(later[0]) if len(later) else self.hi
        with open(self.path, "rb") as f:
            if self.separator is None:  # JSON lines
                return _next_newline(f, self.lo + at, self.hi)
            return _next_separator(f, self.lo, self.hi, self.lo + at, self.separator,
                                   self.normalize)  # fmt: skip

    def piece_start(self, a: int, b: int) -> Piece:
        """The whole file's numbering at the piece [a, b) of its bytes."""
        if self.table_starts is not None:  # rows are counted by `table_documents`
            return Piece(last=b == self.hi)
        if self.separator is None:  # JSON lines: the newlines before it
            with SpanReader(self.path, cut=(self.lo, a)) as f:
                lines = sum(block.count(b"\n") for block in iter(lambda: f.read(BLOCK), b""))
            return Piece(lines, a, b == self.hi)
        with SpanReader(self.path, self.span, cut=(self.lo, a)) as f:
            blocks = read_blocks(f, self.path, self.normalize, ReadCounts())
            records, offset = -1, 0
            for start, _, _ in split_pieces(blocks, self.separator):
                records, offset = records + 1, start  # the last (empty) piece: the cut's
        return Piece(records, offset, b == self.hi)


def file_cuts(path: Path, fmt: Format, options: ReadOptions, span, size: int) -> FileCuts:
    """How `path` (of format `fmt`, `size` bytes, read as the `span` of its source) can be cut."""
    if fmt.kind in ("parquet", "arrow"):
        units = table_units(path, fmt)
        if units is None:
            return FileCuts(path, fmt, 0, size, size, f"{fmt.describe()} (no index of its batches)")
        return FileCuts(path, fmt, 0, size, size, table_starts=units[0])
    if fmt.compression is not None:
        why = f"{fmt.describe()} (one compressed stream, readable only from its start)"
        return FileCuts(path, fmt, 0, size, size, why)
    if fmt.kind == "binary":
        return FileCuts(path, fmt, 0, size, size, fmt.describe())
    if fmt.kind == "jsonl":
        return FileCuts(path, fmt, 0, size, size)
    with SpanReader(path, span) as f:
        lo, hi = f.start, f.end
    if options.separator is None:
        return FileCuts(path, fmt, lo, hi, hi - lo, "one document (no data.separator)")
    sep = options.separator.encode("utf-8")
    return FileCuts(path, fmt, lo, hi, hi - lo, None, sep, options.normalize_newlines, span)


def _next_newline(f, at: int, hi: int) -> int:
    """The first line start at or after byte `at` (hi if none)."""
    pos = at - 1  # a newline just before `at` makes `at` itself a line start
    f.seek(pos)
    while pos < hi:
        block = f.read(min(BLOCK, hi - pos))
        if not block:
            break
        hit = block.find(b"\n")
        if hit >= 0:
            return pos + hit + 1
        pos += len(block)
    return hi


def _next_separator(f, lo: int, hi: int, at: int, sep: bytes, normalize: bool) -> int:
    """The end of the first separator match starting at or after byte `at` that the whole
    text's split (from `lo`) also finds: no overlapping match starts before it (hi if none).
    Matches are looked for in the normalized text of a window of raw bytes that begins 2
    separator lengths early (at least a separator's length of normalized characters)."""
    n = len(sep)
    start = at
    while start < hi:
        s, e = max(lo, start - 2 * n), min(hi, start + BLOCK)
        f.seek(s)
        text, raw_at = _normalized(f.read(e - s), normalize)  # raw_at: [len(text) + 1]
        margin = 0 if e == hi else 1  # a CR at the window's end may pair with the next LF
        q = text.find(sep, int(np.searchsorted(raw_at, start - s)))
        while q >= 0 and q + n <= len(text) - margin:
            if text.find(sep, max(0, q - n + 1)) == q:  # no overlapping match before it
                return s + int(raw_at[q + n])
            q = text.find(sep, q + 1)
        if e == hi:
            return hi
        start = max(start + 1, e - 2 * n - 2)
    return hi


def _normalized(raw: bytes, normalize: bool) -> tuple[bytes, np.ndarray]:
    """(the bytes with CRLF / CR -> LF when `normalize`, int64 [len + 1]: the raw offset of
    each of its bytes, then len(raw))."""
    b = np.frombuffer(raw, dtype=np.uint8)  # [raw]
    keep = np.ones(len(b), dtype=bool)
    if normalize:
        keep[1:] = ~((b[1:] == 10) & (b[:-1] == 13))  # the LF of a CRLF goes
    out = b[keep]
    if normalize:
        out = np.where(out == 13, np.uint8(10), out)
    return out.tobytes(), np.append(np.flatnonzero(keep), len(b))
