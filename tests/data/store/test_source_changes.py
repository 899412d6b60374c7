"""A source that changes while `prepare` reads it: an error naming the file, never a store
(or tokenizer) whose fingerprint names bytes that were not read; a cached store is reused only
when its record of what was read is the sources' listing now."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

import packlm.data.store.prepared as prepared_module
from helpers.stores import VOCAB, decoded
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.prepared import prepare_stores
from packlm.data.store.sources import (
    ReadCounts,
    ReadOptions,
    SourceError,
    iter_documents,
    resolve_sources,
)
from packlm.data.store.token_store import MANIFEST_FILE
from packlm.data.store.verify import manifest_checksum

DOCS = [f"document {i}: the quick brown fox jumps over the lazy dog {i * 7}" for i in range(40)]


def write(path: Path, docs: list[str]) -> Path:
    path.write_text("\n\n".join(docs), encoding="utf-8")
    return path


def prepare(cache: Path, sources, val_sources=None, val_fraction=0.25):
    data = DataConfig(sources=sources, val_sources=val_sources, separator="\n\n",
                      val_fraction=val_fraction)  # fmt: skip
    return prepare_stores(data, TokenizerConfig(vocab_size=VOCAB), cache, progress=False,
                          num_workers=0)  # fmt: skip


def truncate_after_listing(monkeypatch, path: Path, keep: int) -> os.stat_result:
    """Cut `path` to `keep` bytes right after prepare lists the sources (their fingerprint is
    taken), before any byte is read; returns the file's stat as listed."""
    listed = path.stat()
    real = prepared_module.Corpus.from_config

    def from_config(data):
        corpus = real(data)
        with open(path, "r+b") as f:
            f.truncate(keep)
        return corpus

    monkeypatch.setattr(prepared_module.Corpus, "from_config", staticmethod(from_config))
    return listed


def stores_in(cache: Path) -> list[str]:
    root = cache / "stores"
    return [p.name for p in root.iterdir() if not p.name.startswith(".")] if root.exists() else []


def test_a_file_truncated_after_listing_is_an_error_and_the_restored_file_is_read_whole(
    tmp_path, monkeypatch
):
    """Before: the tokenizer and the store were built from the cut file under the full file's
    fingerprint (exit 0); restored with its old mtime, the stale store was reused."""
    src = write(tmp_path / "a.txt", DOCS)
    full = src.read_bytes()
    listed = truncate_after_listing(monkeypatch, src, keep=100)
    with pytest.raises(SourceError, match="changed while it was read") as e:
        prepare(tmp_path / "cache", [str(src)])
    assert str(e.value).startswith(f"{src}: ") and f"{len(full):,} bytes" in str(e.value)
    assert "now 100 bytes" in str(e.value)
    assert stores_in(tmp_path / "cache") == []
    assert not any((tmp_path / "cache" / "tokenizers").glob("[0-9a-f]*"))
    monkeypatch.undo()
    src.write_bytes(full)  # `cp -p`: the old content and the old mtime
    os.utime(src, ns=(listed.st_atime_ns, listed.st_mtime_ns))
    prepared = prepare(tmp_path / "cache", [str(src)])
    assert sorted(decoded(prepared, "train") + decoded(prepared, "val")) == sorted(DOCS)


def test_a_val_source_truncated_during_the_store_build_is_an_error(tmp_path, monkeypatch):
    """The tokenizer is cached (it reads data.sources only): the store build's read fails."""
    train = write(tmp_path / "train.txt", DOCS)
    val = write(tmp_path / "val.txt", ["held out one", "held out two"] * 20)
    prepare(tmp_path / "cache", [str(train)], [str(val)])
    write(val, ["held out one", "held out two, changed"] * 20)
    truncate_after_listing(monkeypatch, val, keep=20)
    before = stores_in(tmp_path / "cache")
    with pytest.raises(SourceError, match=f"^{val}: changed while it was read"):
        prepare(tmp_path / "cache", [str(train)], [str(val)])
    assert stores_in(tmp_path / "cache") == before


def test_bytes_read_must_be_the_listed_size_even_when_size_and_mtime_are_restored(tmp_path):
    """Cut before it is read, restored (content and mtime) before the check: the stat agrees
    with the listing, but fewer bytes were read than it names."""
    src = write(tmp_path / "a.txt", DOCS)
    full, st = src.read_bytes(), src.stat()
    docs = iter_documents(resolve_sources([str(src)]), ReadOptions(separator="\n\n"), ReadCounts())
    with open(src, "r+b") as f:
        f.truncate(30)
    assert next(docs).text == DOCS[0][:30]  # the whole of what is left
    src.write_bytes(full)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(SourceError, match=f"{len(full):,} bytes.*30 bytes read"):
        next(docs)


def test_a_file_that_grows_while_it_is_read_is_an_error(tmp_path):
    src = write(tmp_path / "a.jsonl", [])
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS[:3]), encoding="utf-8")
    docs = iter_documents(resolve_sources([str(src)]), ReadOptions(), ReadCounts())
    assert next(docs).text == DOCS[0]
    with open(src, "a", encoding="utf-8") as f:
        f.write(json.dumps({"text": "appended"}) + "\n")
    with pytest.raises(SourceError, match=f"^{src}: changed while it was read"):
        list(docs)


def cached_manifests(cache: Path) -> list[Path]:
    return sorted((cache / "stores").glob(f"*/*/{MANIFEST_FILE}"))


def rewrite(path: Path, edit) -> None:
    manifest = json.loads(path.read_text())
    edit(manifest)
    manifest["manifest_checksum"] = manifest_checksum(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("record", ["absent", "other"])
def test_a_cached_store_is_reused_only_if_it_read_what_the_sources_are(tmp_path, caplog, record):
    """A store without the record (an older packlm, which may have read a changing file) or
    with another one is rebuilt, naming the manifest; a consistent one is reused."""
    src = write(tmp_path / "a.txt", DOCS)
    first = prepare(tmp_path / "cache", [str(src)])
    manifest = cached_manifests(tmp_path / "cache")[0]  # train

    def edit(m):
        if record == "absent":
            m["sources"] = [{"name": s["name"]} for s in m["sources"]]
        else:
            m["sources"][0]["read"]["bytes"] -= 1000

    rewrite(manifest, edit)
    caplog.set_level(logging.INFO, logger="packlm.data.store.prepared")
    again = prepare(tmp_path / "cache", [str(src)])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("building")]
    why = "does not record what was read" if record == "absent" else f"source {str(src)!r} was read"
    assert len(lines) == 1 and str(manifest) in lines[0] and why in lines[0], lines
    assert decoded(again, "train") == decoded(first, "train")
    caplog.clear()
    prepare(tmp_path / "cache", [str(src)])
    assert not [r for r in caplog.records if r.getMessage().startswith("building")]
