"""Text and JSON-lines files -> documents, streamed in blocks (bounded memory per file).

Newlines: with `data.normalize_newlines` (the default) CRLF and lone CR become LF before a
file is split on `data.separator`, so a Windows file splits like its LF copy; the files
changed are counted. Invalid UTF-8 follows `data.encoding_errors` (strict: the error names
the path and byte offset; replace: U+FFFD; skip: the document is dropped), counted.
A document holding a run of `NUL_RUN` NUL bytes (the zero tail of an interrupted copy or a
preallocated file, past the first block that `formats.detect` sniffs) is binary, as it is
read: an error for a file named alone, dropped and counted (`skipped_binary`) in a walk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from packlm.data.store.sources.document import (
    WHOLE,
    Document,
    Piece,
    ReadCounts,
    ReadOptions,
    SourceError,
)

BLOCK = 1 << 20  # read size when splitting a text file on the separator
NOT_JSON_LINES = (
    "not JSON lines (one JSON object per line, as .jsonl / .ndjson / .json files are read); "
    "convert it (jq -c '.[]' file.json > file.jsonl) or rename it if it is text"
)
NUL_RUN = b"\x00" * 32
"""Valid UTF-8, but no text holds 32 NUL bytes in a row."""
UTF8_BOM = b"\xef\xbb\xbf"


def text_documents(
    f: BinaryIO, path: Path, prefix: str, index: int, separator: str | None,
    options: ReadOptions, counts: ReadCounts, explicit: bool = True, piece: Piece = WHOLE,
) -> Iterator[Document]:  # fmt: skip
    """One document per file, or one per piece between separators; `explicit`: the file was
    named alone (binary content is an error) or found by a walk (its binary parts skipped);
    `piece`: `f` reads a piece of the file (pieces only where there is a separator)."""
    blocks = read_blocks(f, path, options.normalize_newlines, counts)
    if separator is None:
        data = b"".join(blocks)
        if not is_binary(data, path, 0, explicit, counts):
            text = decode(data, path, 0, options.encoding_errors, counts)
            if text is not None:
                yield Document(text, prefix, index)
        return
    pieces = split_pieces(blocks, separator.encode("utf-8"), piece.offset)
    for k, (offset, data, final) in enumerate(pieces, start=piece.records):
        if final and not piece.last:  # the empty rest after the piece's last separator
            break
        if is_binary(data, path, offset, explicit, counts):
            continue
        text = decode(data, path, offset, options.encoding_errors, counts)
        if text is not None:
            yield Document(text, f"{prefix}:{k}", index)


def json_lines(
    f: BinaryIO, path: Path, options: ReadOptions, counts: ReadCounts, explicit: bool = True,
    piece: Piece = WHOLE, bad: Callable[[str, str], None] | None = None,
) -> Iterator[tuple[int, str, Any]]:  # fmt: skip
    """(line number, `path:line`, parsed record) of each JSON line that reads as text (blank,
    binary and undecodable lines counted and passed over). A line that is not JSON goes to
    `bad(where, why)` (None: an error), but a first line opening one JSON document over
    many lines is always the error that the file is not JSON lines. A UTF-8 byte order mark
    opening the file (Windows editors write one) is an encoding mark, not the record's."""
    offset = piece.offset
    for line_no, raw in enumerate(_lines(f, path), start=piece.records + 1):
        where = f"{path}:{line_no}"
        line_offset, offset = offset, offset + len(raw)
        if line_offset == 0 and raw.startswith(UTF8_BOM):
            raw, line_offset = raw[len(UTF8_BOM) :], len(UTF8_BOM)
        if not raw.strip() or is_binary(raw, path, line_offset, explicit, counts):
            continue
        line = decode(raw, where, line_offset, options.encoding_errors, counts)
        if line is None:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if line_no == 1 and (line.strip() == "{" or line.lstrip().startswith("[")):
                raise SourceError(f"{path}: {NOT_JSON_LINES}") from e
            why = f"{e.msg} at column {e.colno}"
            if not raw.endswith(b"\n"):  # the last line: an interrupted write or copy
                why += "; the file's last line, with no newline: is the file cut short?"
        except RecursionError:  # json's C parser recurses once per level ([[[[...)
            why = f"nested deeper than Python's JSON parser reads ({len(line)} characters)"
        else:
            yield line_no, where, record
            continue
        if bad is None:
            raise SourceError(f"{where}: not valid JSON ({why})")
        bad(where, why)


def jsonl_documents(
    f: BinaryIO, path: Path, prefix: str, index: int, options: ReadOptions, counts: ReadCounts,
    explicit: bool = True, piece: Piece = WHOLE,
) -> Iterator[Document]:  # fmt: skip
    """One document per JSON record (`data.text_field`), ids ending in the line number (in
    the whole file where `f` reads a `piece` of it)."""
    field_name = options.text_field
    for line_no, where, record in json_lines(f, path, options, counts, explicit, piece):
        if isinstance(record, list) and line_no == 1:  # a whole file that is one array
            raise SourceError(f"{where}: a JSON array; {NOT_JSON_LINES}")
        if not isinstance(record, dict):
            raise SourceError(f"{where}: a JSON {type(record).__name__}, not an object with "
                              f"field {field_name!r} (data.text_field)")  # fmt: skip
        if field_name not in record:
            fields = ", ".join(map(repr, list(record)[:20])) + (", ..." if len(record) > 20 else "")
            raise SourceError(
                f"{where}: no field {field_name!r} (data.text_field) in this record; it has "
                f"{fields or 'no fields'}{_chat_hint(record)}"
            )
        text = record[field_name]
        if not isinstance(text, str):
            raise SourceError(
                f"{where}: field {field_name!r} is {type(text).__name__}, not a string"
            )
        text = check_surrogates(text, where, options.encoding_errors, counts)
        if text is not None and options.normalize_newlines and "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            counts.normalized_newlines += 1
        if text is not None:
            yield Document(text, f"{prefix}:{line_no}", index)


def _chat_hint(record: dict) -> str:
    """A record of conversations read as text: say how to read it as conversations."""
    from packlm.data.store.sources.conversations import FORM_FIELDS

    if not any(all(k in record for k in keys) for keys in FORM_FIELDS.values()):
        return ""
    return "; conversations? give the source as {path: ..., chat: auto}"


def read_blocks(f: BinaryIO, path: Path, normalize: bool, counts: ReadCounts) -> Iterator[bytes]:
    """The file's bytes block by block, CRLF / CR -> LF when `normalize` (a CR ending a
    block waits for the next one, so a CRLF split between blocks is one newline)."""
    changed, held = False, b""
    while block := read(f, path, BLOCK):
        if not normalize:
            yield block
            continue
        block = held + block
        held = b"\r" if block.endswith(b"\r") else b""
        if held:
            block = block[:-1]
        if b"\r" in block:
            changed = True
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        yield block
    if held:
        changed = True
        yield b"\n"
    if changed:
        counts.normalized_newlines += 1


def split_pieces(
    blocks: Iterator[bytes], sep: bytes, start: int = 0
) -> Iterator[tuple[int, bytes, bool]]:
    """(byte offset, piece, is the final piece) of a stream of blocks split on `sep`, the
    leftmost match first (offsets after newline normalisation, from `start`)."""
    buf, search = bytearray(), 0
    for block in blocks:
        buf += block
        pos = 0
        while (hit := buf.find(sep, search)) >= 0:
            yield start, bytes(buf[pos:hit]), False
            start += hit - pos + len(sep)
            pos = search = hit + len(sep)
        del buf[:pos]
        search = max(0, len(buf) - len(sep) + 1)
    yield start, bytes(buf), True


def is_binary(data: bytes, path: Path, offset: int, explicit: bool, counts: ReadCounts) -> bool:
    """Does this document hold a run of NUL bytes? Then it is not text: an error in a file
    named alone, else True (skip it), counted as `skipped_binary` like a walk's binary files."""
    at = data.find(NUL_RUN)
    if at < 0:
        return False
    if explicit:
        raise SourceError(
            f"{path}: binary data at byte offset {offset + at} ({len(data) - at:,} bytes from "
            f"there on hold a run of {len(NUL_RUN)}+ NUL bytes: an interrupted copy or a "
            "preallocated file?), not text; give the file's text only (a directory or glob skips "
            "such documents and counts them)"
        )
    counts.skipped_binary += 1
    return True


def read(f: BinaryIO, path: Path, size: int = -1) -> bytes:
    try:
        return f.read(size)
    except (OSError, EOFError) as e:  # includes a truncated compressed file
        raise SourceError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from e


def _lines(f: BinaryIO, path: Path) -> Iterator[bytes]:
    try:
        yield from f
    except (OSError, EOFError) as e:
        raise SourceError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from e


def decode(data: bytes, where: Any, offset: int, policy: str, counts: ReadCounts) -> str | None:
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


def check_surrogates(text: str, where: str, policy: str, counts: ReadCounts) -> str | None:
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
