"""The data people have: compressed text and JSONL, Parquet / Arrow / save_to_disk, code
trees with include/exclude, binary and special files, CRLF, odd names; every byte counted."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os

import pytest

from packlm.config.data import DataConfig
from packlm.data.store.sources import (
    ReadCounts,
    ReadOptions,
    SourceError,
    iter_documents,
    resolve_sources,
)
from packlm.data.store.sources import text as text_module
from packlm.data.store.sources.formats import detect
from packlm.errors import ConfigError

TEXTS = ["first document\nwith two lines", "second — ünïcode", "third"]
JSONL = "".join(json.dumps({"text": t}) + "\n" for t in TEXTS).encode()
COMPRESS = {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


def read(entries, **options):
    counts = ReadCounts()
    docs = list(iter_documents(resolve_sources(entries), ReadOptions(**options), counts))
    return [d.text for d in docs], counts


@pytest.mark.parametrize("codec", sorted(COMPRESS))
@pytest.mark.parametrize("name", ["data.jsonl.{ext}", "data.bin"])  # detected by content, not name
def test_compressed_jsonl_and_text(tmp_path, codec, name):
    ext = {"gzip": "gz", "bz2": "bz2", "xz": "xz"}[codec]
    path = tmp_path / name.format(ext=ext)
    path.write_bytes(COMPRESS[codec](JSONL))
    texts, _ = read([str(path)])
    expected = TEXTS if path.name.startswith("data.jsonl") else [JSONL.decode()]
    assert texts == expected and detect(path).compression == codec
    plain = tmp_path / f"notes.txt.{ext}"
    plain.write_bytes(COMPRESS[codec]("\n\n".join(TEXTS).encode()))
    assert read([str(plain)], separator="\n\n")[0] == TEXTS


def test_zstd_through_zstandard_or_a_clear_error(tmp_path, monkeypatch):
    zstandard = pytest.importorskip("zstandard", reason='pip install "packlm[zstd]"')
    path = tmp_path / "data.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(JSONL))
    assert read([str(path)])[0] == TEXTS
    import builtins

    real_import = builtins.__import__

    def no_zstd(name, *args, **kwargs):
        if name in ("zstandard", "compression"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zstd)
    with pytest.raises(SourceError, match=r"data\.jsonl\.zst: zstd-compressed; .*packlm\[zstd\]"):
        read([str(path)])


@pytest.mark.parametrize("name", ["upper.JSONL", "records.ndjson", "lines.json", "Mixed.JsonL"])
def test_json_lines_under_any_case_and_name(tmp_path, name):
    (tmp_path / name).write_bytes(JSONL)
    assert read([str(tmp_path / name)])[0] == TEXTS


def test_parquet_arrow_feather_and_a_save_to_disk_folder(tmp_path):
    pa = pytest.importorskip("pyarrow", reason='pip install "packlm[arrow]"')
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    table = pa.table({"id": [1, 2, 3, 4], "body": [*TEXTS, None]})
    pq.write_table(table, tmp_path / "shard.parquet", row_group_size=2)
    feather.write_feather(table, tmp_path / "shard.feather")
    with (
        pa.OSFile(str(tmp_path / "shard.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, table.schema) as w,
    ):
        w.write_table(table)
    folder = tmp_path / "saved"
    folder.mkdir()
    stream = str(folder / "data-00000-of-00001.arrow")
    with pa.OSFile(stream, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (folder / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
    )
    (folder / "dataset_info.json").write_text("{}")
    for entry in ("shard.parquet", "shard.feather", "shard.arrow", "saved"):
        texts, counts = read([str(tmp_path / entry)], text_field="body")
        assert texts == TEXTS and counts.empty == 1, entry  # the null row is counted
    with pytest.raises(
        SourceError,
        match=r"shard\.parquet: no column 'text' \(data\.text_field\); it has \['id', 'body'\]",
    ):
        read([str(tmp_path / "shard.parquet")])


def test_pyarrow_missing_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "x.parquet").write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(
        builtins, "__import__",
        lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name)) if name.startswith("pyarrow") else real_import(name, *a, **k),
    )  # fmt: skip
    with pytest.raises(
        SourceError, match=r"x\.parquet: .*needs pyarrow \(pip install \"packlm\[arrow\]\"\)"
    ):
        read([str(tmp_path / "x.parquet")])


def test_a_code_tree_with_include_exclude_binary_and_special_files(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg" / "tests").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def a():\n    return 1\n")
    (root / "pkg" / "tests" / "test_a.py").write_text("def test_a(): ...\n")
    (root / "pkg" / "a.cpython-311.pyc").write_bytes(b"\xa7\r\r\n\x00\x00\x00\x00" + bytes(64))
    (root / "README.md").write_text("# repo\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(32))
    os.symlink(root / "pkg" / "a.py", root / "link.py")
    os.mkfifo(root / "pipe")  # a walk must not block on it
    texts, counts = read([str(root)])
    assert sorted(texts) == sorted(["# repo\n", "def a():\n    return 1\n", "def test_a(): ...\n"])
    assert counts.skipped_binary == 2 and counts.skipped_special == 1
    assert counts.left_out == {"second_names": [f"{root}/link.py (read as {root}/pkg/a.py)"]}
    assert counts.skipped_invalid_utf8 == 0  # binaries are not "invalid text"
    only = read([{"path": str(root), "include": ["*.py"], "exclude": ["**/tests/**", "link.py"]}])
    assert only[0] == ["def a():\n    return 1\n"]


def test_an_existing_path_with_glob_characters_is_that_file(tmp_path):
    (tmp_path / "notes[1].txt").write_text("the note")
    (tmp_path / "notes1.txt").write_text("another file a glob would match")
    assert read([str(tmp_path / "notes[1].txt")])[0] == ["the note"]


def test_an_unknown_binary_file_named_alone_is_an_error_naming_its_format(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(SourceError, match=rf"{path}: binary data \(NUL bytes.*\), not text") as e:
        read([str(path)])
    assert "encoding_errors" not in str(e.value)


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_text_splits_like_lf_and_is_counted(tmp_path, monkeypatch, newline):
    monkeypatch.setattr(text_module, "BLOCK", 5)  # CR LF pairs straddle block boundaries
    lf = "\n\n".join(TEXTS).encode()
    (tmp_path / "lf.txt").write_bytes(lf)
    (tmp_path / "other.txt").write_bytes(lf.replace(b"\n", newline))
    expected, _ = read([str(tmp_path / "lf.txt")], separator="\n\n")
    texts, counts = read([str(tmp_path / "other.txt")], separator="\n\n")
    assert texts == expected == TEXTS and counts.normalized_newlines == 1
    kept, _ = read([str(tmp_path / "other.txt")], separator="\n\n", normalize_newlines=False)
    assert len(kept) == 1  # as the bytes are


def test_source_entry_keys_are_checked():
    with pytest.raises(ConfigError, match=r"data\.sources\[0\]\.include='\*\.py': a list"):
        DataConfig(sources=[{"path": "src", "include": "*.py"}]).validate()
    with pytest.raises(ConfigError, match=r"data\.sources\[0\]: unknown keys \['colour'\]"):
        DataConfig(sources=[{"path": "src", "colour": 1}]).validate()
