"""What reading a source produces and what it counts: documents, options, tallies, errors."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Document(NamedTuple):
    text: str
    doc_id: str
    """Stable across runs and machines: "<source index>:<path>[:<record line or split index>]"."""
    source_index: int
    """Position of the document's entry in data.sources (or data.val_sources)."""
    turns: tuple[tuple[str, str], ...] | None = None
    """A conversation's (role, content) turns (`sources.conversations`; `text` is then their
    rendering); None for a text document."""


TURN_MARK = "@turn"
"""A piece of a conversation cut between turns (data.chat_overflow=cut_turns) has the
conversation's id with "@turn{k}" after it, k its first turn."""
_CUT_PIECE = re.compile(r"(.*:\d+)@turn(\d+)")  # a conversation always has a record


def split_turn(doc_id: str) -> tuple[str, int | None]:
    """(the conversation's id, the piece's first turn) of a cut conversation's piece;
    (doc_id, None) for any other document."""
    cut = _CUT_PIECE.fullmatch(doc_id)
    return (cut.group(1), int(cut.group(2))) if cut else (doc_id, None)


def parse_doc_id(doc_id: str) -> dict[str, Any]:
    """`source:path[@span][:record][@turn<k>]` -> path and record (a JSONL line number, a
    Parquet row, the k-th piece of a text file split on data.separator); None where the id has
    none. A cut conversation's piece gives its conversation's (`split_turn` gives k)."""
    _, _, rest = split_turn(doc_id)[0].partition(":")
    path, _, last = rest.rpartition(":")
    if path and last.isdigit():
        return {"path": path, "record": int(last)}
    return {"path": rest or None, "record": None}


class Piece(NamedTuple):
    """Where a piece of a file (`data.shard` cut it between records) starts in the whole
    file's numbering, so its documents keep the ids and byte offsets of the whole file."""

    records: int = 0
    """Records before it: JSONL lines, or pieces of a text file split on data.separator."""
    offset: int = 0
    """Its first byte's offset in the file (after newline normalisation for split text)."""
    last: bool = True
    """It ends where the file (or span) does; else it ends with a separator whose empty
    remainder is no document (the next piece starts there)."""


WHOLE = Piece()


class SourceError(ValueError):
    """A source that cannot become documents; the message starts with the culprit."""


@dataclass
class ReadOptions:
    """The `data.*` options that decide which documents a source gives."""

    text_field: str = "text"
    separator: str | None = None
    encoding_errors: str = "strict"
    normalize_newlines: bool = True

    @classmethod
    def from_config(cls, data: Any) -> ReadOptions:
        return cls(data.text_field, data.separator, data.encoding_errors, data.normalize_newlines)


@dataclass
class ReadCounts:
    """What reading dropped or changed, for the manifest (never a silent loss)."""

    empty: int = 0
    """Documents with no text (an empty file, two separators in a row)."""
    skipped_invalid_utf8: int = 0
    """Documents dropped under encoding_errors=skip."""
    replaced_invalid_utf8: int = 0
    """Documents kept with U+FFFD under encoding_errors=replace."""
    skipped_binary: int = 0
    """Files of a directory or glob that are binary (NUL bytes, an image, an archive...), and
    their documents (a JSONL line) holding a run of NUL bytes past the sniffed first block."""
    skipped_special: int = 0
    """Entries of a directory or glob that are no regular file (FIFOs, sockets, devices)."""
    left_out: dict[str, list[str]] = field(default_factory=dict)
    """What walks and globs left out by the link rule (`sources.walk`): broken links, second
    names of a file, folders reached again -> the names (special files are `skipped_special`)."""
    normalized_newlines: int = 0
    """Files or records whose CRLF / CR newlines became LF (data.normalize_newlines)."""
    bad_records: dict[str, int] = field(default_factory=dict)
    """Conversation records dropped, by reason (`sources.conversations.BadRecord`)."""
    bad_record_examples: list[str] = field(default_factory=list)
    """The first of them, "path:line: reason: detail"."""
    files_read: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    """Per source index, (path, size, mtime_ns) of each file after it was read, checked equal
    to the listing (`packlm.data.store.sources.iter_documents`): the manifest's record."""

    def dropped(self) -> dict[str, int]:
        """What never reached the store, by reason."""
        return {
            "empty": self.empty,
            "invalid_utf8": self.skipped_invalid_utf8,
            "binary": self.skipped_binary,
            "special_files": self.skipped_special,
            **{reason: len(names) for reason, names in self.left_out.items()},
            **({"bad_conversations": sum(self.bad_records.values())} if self.bad_records else {}),
        }
