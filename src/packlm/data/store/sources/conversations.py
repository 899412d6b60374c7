"""Conversation records -> documents: four record forms, one list of (role, content) turns.

A source entry with `chat: auto` (or a form) reads each JSONL line, Parquet or Arrow row as
one conversation, one document:

- `messages`: {"messages": [{"role": r, "content": c}, ...]} (OpenAI / Hugging Face), roles
  system, user, assistant, tool;
- `sharegpt`: {"conversations": [{"from": f, "value": v}, ...]}, human -> user, gpt ->
  assistant (and `SHAREGPT_ROLES`);
- `alpaca`: {"instruction": i, "input": x, "output": o} -> user "i" (or "i\\n\\nx" when the
  input is not empty), assistant "o"; an optional "system" string comes first;
- `prompt_completion`: {"prompt": p, "completion": c}: user p, assistant c (each may also
  be a list of messages, as TRL's conversational form).

`auto` recognises the form by its fields; a record with the fields of two forms is ambiguous
unless the entry names the form. A bad record (none of the forms, an unknown role, wrong
types, no turn, no assistant turn, invalid JSON) is counted by reason in `ReadCounts.bad_records`,
its file and line named in the log and in the manifest (the first `EXAMPLES`), never dropped
in silence. The document's text is the ChatML rendering (`packlm.tokenizer.chat`): what the
hash split and the tokenizer's training read; the turns travel beside it to the encoder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from packlm.config.sources import CHAT_FORMS
from packlm.data.store.sources.document import (
    WHOLE,
    Document,
    Piece,
    ReadCounts,
    ReadOptions,
    SourceError,
)
from packlm.data.store.sources.text import (
    check_surrogates,
    json_lines,
)
from packlm.tokenizer.chat import ROLES, Turn, render_text

log = logging.getLogger(__name__)

SHAREGPT_ROLES = {
    "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
    "chatgpt": "assistant", "model": "assistant", "system": "system", "tool": "tool",
    "function": "tool", "observation": "tool",
}  # fmt: skip
FORM_FIELDS = {
    "messages": ("messages",),
    "sharegpt": ("conversations",),
    "alpaca": ("instruction", "output"),
    "prompt_completion": ("prompt", "completion"),
}
"""The fields that make a record one form under `chat: auto`."""
RECORDS = 2
"""Part of a chat source's fingerprint: bump it when the same records would give other turns
(2: a UTF-8 BOM, roles in any case or padded, content as text parts)."""
EXAMPLES = 20
"""Bad records named one by one (log and manifest); past that, counted only."""


class BadRecord(ValueError):
    """A record that is no conversation; `reason` is its tally's key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def record_turns(record: Any, form: str = "auto") -> list[Turn]:
    """The (role, content) turns of one record in `form` (or the form its fields say)."""
    if not isinstance(record, dict):
        raise BadRecord("not_a_conversation", f"a JSON {type(record).__name__}, not an object")
    if form == "auto":
        forms = [f for f, keys in FORM_FIELDS.items() if all(k in record for k in keys)]
        if not forms:
            fields = ", ".join(map(repr, list(record)[:10])) or "no fields"
            raise BadRecord(
                "not_a_conversation",
                f"none of the conversation forms (messages, conversations, instruction+output, "
                f"prompt+completion); it has {fields}",
            )
        if len(forms) > 1:
            raise BadRecord(
                "ambiguous",
                f"fields of the forms {forms}: name one as the source's chat key "
                f"({{path: ..., chat: {forms[0]}}})",
            )
        form = forms[0]
    turns = _FORMS[form](record)
    if not turns:
        raise BadRecord("empty", "a conversation with no turn")
    if not any(role == "assistant" for role, _ in turns):
        raise BadRecord("no_assistant", "no assistant turn (nothing would be learned)")
    return turns


def _messages(record: dict, key: str = "messages") -> list[Turn]:
    return _turn_list(_field(record, key), key, "role", "content", {r: r for r in ROLES})


def _sharegpt(record: dict) -> list[Turn]:
    return _turn_list(_field(record, "conversations"), "conversations", "from", "value",
                      SHAREGPT_ROLES)  # fmt: skip


def _alpaca(record: dict) -> list[Turn]:
    instruction, output = _string(record, "instruction"), _string(record, "output")
    extra = _string(record, "input", missing_ok=True) or ""
    system = _string(record, "system", missing_ok=True)
    user = instruction + ("\n\n" + extra if extra else "")
    return ([("system", system)] if system else []) + [("user", user), ("assistant", output)]


def _prompt_completion(record: dict) -> list[Turn]:
    turns = []
    for key, role in (("prompt", "user"), ("completion", "assistant")):
        value = _field(record, key)
        if isinstance(value, list):  # TRL's conversational prompt / completion
            turns += _messages(record, key)
        else:
            turns.append((role, _string(record, key)))
    return turns


_FORMS = {"messages": _messages, "sharegpt": _sharegpt, "alpaca": _alpaca,
          "prompt_completion": _prompt_completion}  # fmt: skip


def _field(record: dict, key: str) -> Any:
    if key not in record:
        raise BadRecord("not_a_conversation", f"no field {key!r}")
    return record[key]


def _string(record: dict, key: str, missing_ok: bool = False) -> str | None:
    value = record.get(key)
    if value is None and missing_ok:
        return None
    if key not in record:
        raise BadRecord("not_a_conversation", f"no field {key!r}")
    if not isinstance(value, str):
        raise BadRecord("wrong_type", f"field {key!r} is {type(value).__name__}, not a string")
    return value


def _turn_list(
    items: Any, key: str, role_key: str, content_key: str, roles: dict[str, str]
) -> list[Turn]:
    if not isinstance(items, list):
        hint = " (JSON text? store the list itself)" if isinstance(items, str) else ""
        raise BadRecord("wrong_type", f"field {key!r} is {type(items).__name__}, not a list{hint}")
    turns = []
    for k, item in enumerate(items):
        where = f"{key}[{k}]"
        if not isinstance(item, dict):
            raise BadRecord("wrong_type", f"{where} is {type(item).__name__}, not an object")
        role, content = item.get(role_key), item.get(content_key)
        if not isinstance(role, str):
            raise BadRecord(
                "wrong_type", f"{where}.{role_key} is {type(role).__name__}, not a string"
            )
        name = role.strip().lower()  # "Assistant", " user": the role they name
        if name not in roles:
            raise BadRecord(
                "unknown_role", f"{where}.{role_key}={role[:40]!r}: not one of {sorted(roles)}"
            )
        if isinstance(content, list):  # OpenAI's parts: [{"type": "text", "text": ...}, ...]
            content = _text_parts(content, f"{where}.{content_key}")
        if not isinstance(content, str):
            extra = " (tool_calls are not rendered)" if item.get("tool_calls") else ""
            raise BadRecord(
                "wrong_type",
                f"{where}.{content_key} is {type(content).__name__}, not a string{extra}",
            )
        turns.append((roles[name], content))
    return turns


def _text_parts(parts: list, where: str) -> str:
    """The text of a content given as parts, joined as chat templates join them (nothing
    between); a part that is not text (an image, audio) makes the record one packlm cannot
    train on."""
    texts = []
    for k, part in enumerate(parts):
        if not (isinstance(part, dict) and part.get("type") == "text"):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise BadRecord(
                "wrong_type", f"{where}[{k}] is a {str(kind)[:40]!r} part, not a text part"
            )
        if not isinstance(part.get("text"), str):
            raise BadRecord("wrong_type", f"{where}[{k}].text is not a string")
        texts.append(part["text"])
    return "".join(texts)


def count_bad(counts: ReadCounts, where: str, error: BadRecord) -> None:
    """Tally a bad record by reason; name the first EXAMPLES (log and manifest)."""
    counts.bad_records[error.reason] = counts.bad_records.get(error.reason, 0) + 1
    if len(counts.bad_record_examples) < EXAMPLES:
        line = f"{where}: {error.reason}: {error}"
        counts.bad_record_examples.append(line)
        log.warning("conversation dropped: %s", line)


def conversation_document(
    record: Any, where: str, doc_id: str, index: int, form: str,
    options: ReadOptions, counts: ReadCounts,
) -> Document | None:  # fmt: skip
    """The document of one record, or None (counted) for a bad one or skipped text."""
    try:
        turns = record_turns(record, form)
    except BadRecord as e:
        count_bad(counts, where, e)
        return None
    clean: list[Turn] = []
    changed = False
    for role, content in turns:
        content = check_surrogates(content, where, options.encoding_errors, counts)
        if content is None:  # encoding_errors=skip: the whole conversation, counted there
            return None
        if options.normalize_newlines and "\r" in content:
            content, changed = content.replace("\r\n", "\n").replace("\r", "\n"), True
        clean.append((role, content))
    counts.normalized_newlines += changed
    turns_t = tuple(clean)
    return Document(render_text(turns_t), doc_id, index, turns_t)


def conversation_lines(
    f: BinaryIO, path: Path, prefix: str, index: int, form: str, options: ReadOptions,
    counts: ReadCounts, explicit: bool = True, piece: Piece = WHOLE,
) -> Iterator[Document]:  # fmt: skip
    """One conversation per JSON line, ids ending in the line number (in the whole file
    where `f` reads a `piece` of it); a line that is not JSON is a bad record."""

    def invalid(where: str, why: str) -> None:
        count_bad(counts, where, BadRecord("invalid_json", why))

    for line_no, where, record in json_lines(f, path, options, counts, explicit, piece, invalid):
        doc = conversation_document(record, where, f"{prefix}:{line_no}", index, form, options,
                                    counts)  # fmt: skip
        if doc is not None:
            yield doc


def conversation_rows(
    path: Any, prefix: str, index: int, form: str, options: ReadOptions, counts: ReadCounts,
    fmt: Any,
) -> Iterator[Document]:  # fmt: skip
    """One conversation per Parquet / Arrow row (all columns, read in record batches), ids
    ending in the row number."""
    from packlm.data.store.sources.tables import BATCH_ROWS, _pyarrow

    pa = _pyarrow(path)
    if fmt.compression:
        raise SourceError(f"{path}: {fmt.describe()}; decompress it first")
    try:
        if fmt.kind == "parquet":
            import pyarrow.parquet as pq

            batches = pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)
        else:
            opened = pa.ipc.open_stream if fmt.detail == "an Arrow stream" else pa.ipc.open_file
            reader = opened(pa.memory_map(str(path)))
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if hasattr(
                reader, "num_record_batches") else reader  # fmt: skip
        row = 0
        for batch in batches:
            for record in batch.to_pylist():
                row += 1
                doc = conversation_document(record, f"{path}:row {row}", f"{prefix}:{row}",
                                            index, form, options, counts)  # fmt: skip
                if doc is not None:
                    yield doc
    except pa.ArrowException as e:
        raise SourceError(f"{path}: cannot read the {fmt.describe()} file ({e})") from e


def chat_documents(
    source: Any, path: Any, fmt: Any, prefix: str, cut: tuple[int, int] | None,
    options: ReadOptions, counts: ReadCounts,
) -> Iterator[Document]:  # fmt: skip
    """The conversations of file `path` of a chat source (of its span or data.shard piece)."""
    from packlm.data.store.sources.cuts import file_cuts
    from packlm.data.store.sources.formats import open_stream
    from packlm.data.store.sources.span import open_span

    form = source.chat
    if fmt.kind in ("parquet", "arrow"):
        if cut is not None or source.span is not None:
            raise SourceError(f"{path}: a chat source's Parquet / Arrow file is read whole "
                              "(no span, no data.shard pieces of it)")  # fmt: skip
        yield from conversation_rows(path, prefix, source.index, form, options, counts, fmt)
        return
    if fmt.kind != "jsonl":
        raise SourceError(
            f"{path}: {fmt.describe()}; a chat source ({{path: ..., chat: {form}}}) reads "
            "conversations from JSON lines (.jsonl), Parquet or Arrow files"
        )
    if source.span is None and cut is None:
        with open_stream(path, fmt.compression) as f:
            yield from conversation_lines(f, path, prefix, source.index, form, options, counts,
                                          source.explicit)  # fmt: skip
        return
    piece = WHOLE if cut is None else file_cuts(
        path, fmt, options, source.span, source.stats[source.files.index(path)][1]
    ).piece_start(*cut)  # fmt: skip
    with open_span(path, fmt, source.span, cut) as f:
        yield from conversation_lines(f, path, prefix, source.index, form, options, counts,
                                      source.explicit, piece)  # fmt: skip


__all__ = [
    "CHAT_FORMS",
    "BadRecord",
    "chat_documents",
    "conversation_lines",
    "conversation_rows",
    "record_turns",
]
