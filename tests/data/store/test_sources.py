"""Sources -> documents: every entry kind, stable ids, and each bad input named precisely."""

from __future__ import annotations

import json
import re

import pytest

from packlm.config.data import DataConfig
from packlm.data.store.corpus import Corpus
from packlm.data.store.sources import (
    Document,
    ReadCounts,
    ReadOptions,
    SourceError,
    iter_documents,
    resolve_sources,
)
from packlm.data.store.sources import formats as formats_module
from packlm.data.store.sources import text as text_module
from packlm.data.store.split import content_hash, is_validation


def read(entries, **options) -> tuple[list[Document], ReadCounts]:
    counts = ReadCounts()
    docs = list(iter_documents(resolve_sources(entries), ReadOptions(**options), counts))
    return docs, counts


def test_text_file_is_one_document_and_glob_order_is_sorted(tmp_path):
    (tmp_path / "b.txt").write_text("bee\n\nbuzz", encoding="utf-8")
    (tmp_path / "a.txt").write_text("ant", encoding="utf-8")
    docs, _ = read([str(tmp_path / "*.txt")])
    assert [d.text for d in docs] == ["ant", "bee\n\nbuzz"]
    assert [d.doc_id for d in docs] == [f"0:{tmp_path}/a.txt", f"0:{tmp_path}/b.txt"]
    assert {d.source_index for d in docs} == {0}


def test_separator_splits_a_file_into_documents_with_split_indices(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("one\n\ntwo\n\n\n\nthree\n\n", encoding="utf-8")
    docs, counts = read([{"path": str(path), "weight": 2.0}], separator="\n\n")
    assert [d.text for d in docs] == ["one", "two", "three"]
    assert [d.doc_id.rsplit(":", 1)[1] for d in docs] == ["0", "1", "3"]
    assert counts.empty == 2  # the empty piece between separators and the trailing one


def test_streamed_split_equals_str_split_across_block_edges(tmp_path, monkeypatch):
    text = "".join(f"document {i} " * (i % 7) + "<>" for i in range(300))
    path = tmp_path / "big.txt"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(text_module, "BLOCK", 13)  # separators straddle block boundaries
    docs, counts = read([str(path)], separator="<>")
    expected = [t for t in text.split("<>") if t]
    assert [d.text for d in docs] == expected
    assert counts.empty == len(text.split("<>")) - len(expected)


def test_jsonl_records_with_line_numbers_and_blank_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    lines = [json.dumps({"body": "first"}), "", json.dumps({"body": "sec\nond", "x": 1})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs, _ = read([str(path)], text_field="body")
    assert [(d.text, d.doc_id) for d in docs] == [
        ("first", f"0:{path}:1"),
        ("sec\nond", f"0:{path}:3"),
    ]


def test_directory_source_and_source_indices(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("x", encoding="utf-8")
    (tmp_path / "d" / "y.jsonl").write_text('{"text": "y"}\n', encoding="utf-8")
    (tmp_path / "d" / ".git").mkdir()
    (tmp_path / "d" / ".git" / "index").write_bytes(b"\xff binary")  # hidden: not read
    (tmp_path / "z.txt").write_text("z", encoding="utf-8")
    docs, _ = read([str(tmp_path / "d"), str(tmp_path / "z.txt")])
    assert [(d.text, d.source_index) for d in docs] == [("x", 0), ("y", 0), ("z", 1)]


def test_default_corpus_reads_without_a_decode_error():
    (source,) = resolve_sources(["default"])
    counts = ReadCounts()
    docs = list(iter_documents([source], ReadOptions(encoding_errors="strict"), counts))
    assert len(docs) == len(source.files) - counts.empty > 100
    assert counts.skipped_invalid_utf8 == counts.replaced_invalid_utf8 == 0
    assert docs[0].doc_id.startswith("0:default/")
    assert len({d.doc_id for d in docs}) == len(docs)


def test_fingerprint_changes_with_the_files(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("one", encoding="utf-8")
    before = resolve_sources([str(path)])[0].fingerprint()
    path.write_text("two!", encoding="utf-8")
    after = resolve_sources([str(path)])[0].fingerprint()
    assert before["digest"] != after["digest"] and after["bytes"] == 4


@pytest.mark.parametrize("entry", ["missing.txt", "nothing-*.txt", "emptydir"])
def test_missing_path_or_empty_glob_names_the_entry(tmp_path, monkeypatch, entry):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "present.txt").write_text("x", encoding="utf-8")
    with pytest.raises(SourceError, match=re.escape(f"data.sources[1]={entry!r}: ")):
        resolve_sources(["present.txt", entry])


def test_invalid_utf8_strict_names_path_and_byte_offset(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"ok text\n\n" + b"caf\xe9 latin-1")
    with pytest.raises(SourceError, match=rf"{path}: not valid UTF-8 at byte offset 12 "):
        read([str(path)], separator="\n\n")


def test_invalid_utf8_replace_and_skip_are_counted(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good\n\nbad \xff\xfe here\n\nalso good")
    docs, counts = read([str(path)], separator="\n\n", encoding_errors="replace")
    assert [d.text for d in docs] == ["good", "bad \ufffd\ufffd here", "also good"]
    assert counts.replaced_invalid_utf8 == 1
    docs, counts = read([str(path)], separator="\n\n", encoding_errors="skip")
    assert [d.text for d in docs] == ["good", "also good"]
    assert counts.skipped_invalid_utf8 == 1


def test_unreadable_file_is_named(tmp_path, monkeypatch):
    path = tmp_path / "secret.txt"
    path.write_text("x", encoding="utf-8")

    def refuse(file, mode="r", *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr(formats_module, "open", refuse, raising=False)  # root ignores chmod 000
    with pytest.raises(SourceError, match=rf"{path}: cannot read \(Permission denied\)"):
        read([str(path)])


def test_jsonl_line_that_is_not_json_names_path_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "fine"}\n{"text": broken\n', encoding="utf-8")
    with pytest.raises(SourceError, match=rf"{path}:2: not valid JSON"):
        read([str(path)])


@pytest.mark.parametrize("record", ['{"body": "x"}', '["text"]', '{"text": 3}'])
def test_jsonl_record_without_the_text_field_names_path_and_line(tmp_path, record):
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "fine"}\n\n' + record + "\n", encoding="utf-8")
    with pytest.raises(SourceError, match=rf"{path}:3: .*field 'text'"):
        read([str(path)])


def test_jsonl_invalid_utf8_and_lone_surrogate(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "\xff"}\n{"text": "\\ud800 x"}\n')
    with pytest.raises(SourceError, match=rf"{path}:2: not valid UTF-8 at byte offset 24"):
        read([str(path)])
    docs, counts = read([str(path)], encoding_errors="replace")
    assert [d.text for d in docs] == ["a", "\ufffd", "\ufffd x"]
    assert counts.replaced_invalid_utf8 == 2


def test_content_hash_is_a_fixed_function_of_the_text():
    # A constant: the split must not change between machines, runs or Python versions.
    assert content_hash(b"hello world") == 0x50B1A332AA338687
    hashes = [content_hash(str(i).encode()) for i in range(20_000)]
    share = sum(is_validation(h, 0.1) for h in hashes) / len(hashes)
    assert 0.09 < share < 0.11


def test_corpus_training_texts_exclude_the_validation_split(tmp_path):
    texts = [f"doc number {i}" for i in range(200)]
    (tmp_path / "a.txt").write_text("\n\n".join(texts), encoding="utf-8")
    corpus = Corpus.from_config(
        DataConfig(sources=[str(tmp_path / "a.txt")], separator="\n\n", val_fraction=0.3)
    )
    train = list(corpus.training_texts())
    val = [t for t in texts if corpus.goes_to_validation(t.encode())]
    assert sorted(train + val) == sorted(texts) and not set(train) & set(val)
    assert 30 < len(val) < 90
