"""Issue #59, family 7, second round: every file packlm derives and caches, damaged in every
way a disk, a careless copy or an editor damages a file (cut short, emptied, overwritten with
other bytes of the same size, replaced by a directory, a JSON value of another type), is
named and rebuilt on the next run, equal to a fresh build: never a traceback, never read.

Before: a store's doc_offsets.npy or doc_sources.npy overwritten with bytes of its own size
was a numpy ValueError traceback on every later run; a manifest.json holding a JSON list an
AttributeError; a store entry that was a file left a stray file beside the rebuilt one; the
tokenizer a checkpoint's tools save under `<cache_dir>/tokenizers/checkpoint-<digest>`,
damaged, failed every later `evaluate` and `export` ("the run's validation split cannot be
read again") and was never written again."""

from __future__ import annotations

import json
import logging
import os
import shutil

import numpy as np
import pytest

from helpers.stores import prepare, write_corpus
from packlm.cache.entry import replace_dir
from packlm.cache.fingerprint import latest
from packlm.data.store.token_store import StoreError, TokenStore


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A corpus, a cache holding its stores, a copy of that cache, and the stores' tokens."""
    root = tmp_path_factory.mktemp("damaged")
    write_corpus(root / "corpus")
    prepared = prepare(root / "corpus", root / "good")
    tokens = {s: np.array(prepared.open(s).tokens) for s in ("train", "val")}
    return root, prepared.open("train").path, tokens


def _same_size_garbage(path):
    path.write_bytes(bytes((i * 7) % 256 for i in range(path.stat().st_size)))


def _edit_manifest(path, **values):
    manifest = json.loads(path.read_text())
    manifest.update(values, manifest_checksum=None)  # a careless edit: no checksum to match
    path.write_text(json.dumps(manifest))


DAMAGE = {
    "offsets_garbage": lambda d: _same_size_garbage(d / "doc_offsets.npy"),
    "sources_garbage": lambda d: _same_size_garbage(d / "doc_sources.npy"),
    "offsets_as_floats": lambda d: np.save(
        d / "doc_offsets.npy", np.load(d / "doc_offsets.npy").astype(np.float64)
    ),
    "tokens_garbage": lambda d: _same_size_garbage(d / "tokens.bin"),
    "ids_a_directory": lambda d: ((d / "doc_ids.txt").unlink(), (d / "doc_ids.txt").mkdir()),
    "manifest_a_list": lambda d: (d / "manifest.json").write_text("[1, 2]"),
    "manifest_a_string": lambda d: (d / "manifest.json").write_text('"manifest"'),
    "manifest_not_utf8": lambda d: (d / "manifest.json").write_bytes(b"\xff\xfe{}"),
    "manifest_files_a_list": lambda d: _edit_manifest(d / "manifest.json", files=[1]),
    "manifest_counts_a_string": lambda d: _edit_manifest(d / "manifest.json", counts="x"),
    "manifest_documents_a_word": lambda d: _edit_manifest(
        d / "manifest.json",
        counts={**json.loads((d / "manifest.json").read_text())["counts"], "documents": "x"},
    ),
    "split_a_file": lambda d: (shutil.rmtree(d), d.write_text("x")),
    "entry_a_file": lambda d: (shutil.rmtree(d.parent), d.parent.write_text("x")),
}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_store_is_named_and_rebuilt_equal(built, tmp_path, caplog, how):
    root, good_train, tokens = built
    cache = tmp_path / "cache"
    shutil.copytree(root / "good", cache)
    train = cache / good_train.relative_to(root / "good")
    DAMAGE[how](train)
    caplog.set_level(logging.INFO)
    again = prepare(root / "corpus", cache)
    for split, expected in tokens.items():
        assert np.array_equal(np.array(again.open(split).tokens), expected), split
    assert again.open("train").doc_id(0) == TokenStore.open(good_train).doc_id(0)
    said = [r.getMessage() for r in caplog.records if "rebuilding" in r.getMessage()]
    assert said and str(train.parent) in said[0], said
    # the entry is whole again and nothing is left beside it
    entries = sorted(p.name for p in train.parent.parent.iterdir() if ".old-" in p.name)
    assert entries == []
    assert TokenStore.open(train).n_docs == TokenStore.open(good_train).n_docs


@pytest.mark.parametrize("how", ["offsets_garbage", "manifest_a_list", "manifest_files_a_list"])
def test_opening_a_damaged_store_is_a_store_error_naming_the_folder(built, tmp_path, how):
    _, good_train, _ = built
    store = tmp_path / "train"
    shutil.copytree(good_train, store)
    DAMAGE[how](store)
    with pytest.raises(StoreError, match=str(store)):
        TokenStore.open(store)


def test_latest_passes_over_files_that_hold_no_object(tmp_path):
    """The fingerprint a rebuild is compared with ('what changed') is read from the newest
    manifest; one holding a list or another type there is passed over, not a TypeError."""
    for name, text in [
        ("a", '{"fingerprint": {"k": 1}}'),
        ("b", "[1]"),
        ("c", '{"fingerprint": 3}'),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.json").write_text(text)
    os.utime(tmp_path / "a" / "m.json", ns=(1, 1))  # the oldest: read only when the others fail
    assert latest(tmp_path, "*/m.json", "fingerprint") == {"k": 1}


@pytest.mark.parametrize("kind", ["file", "link"])
def test_replace_dir_removes_a_file_or_link_in_the_way_but_never_what_a_link_points_to(
    tmp_path, kind
):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious.txt").write_text("keep")
    dest = tmp_path / "entry"
    if kind == "file":
        dest.write_text("x")
    else:
        dest.symlink_to(target)
    tmp = tmp_path / ".entry.tmp"
    tmp.mkdir()
    (tmp / "new.txt").write_text("new")
    replace_dir(tmp, dest)
    assert (dest / "new.txt").read_text() == "new" and not dest.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "entry"]
    assert (target / "precious.txt").read_text() == "keep"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    write_corpus(root / "corpus")
    return prepare(root / "corpus", root / "cache").tokenizer


@pytest.mark.parametrize(
    "how", ["vocab_cut", "merges_empty", "config_empty", "merges_a_directory", "folder_a_file"]
)
def test_a_damaged_checkpoint_tokenizer_copy_is_named_and_written_again(
    tokenizer, tmp_path, caplog, how
):
    """evaluate and export save a checkpoint's tokenizer once under the cache and load it by
    path: a copy damaged since was trusted by its name and failed every later run."""
    from packlm.checkpoint.load import tokenizer_config_of
    from packlm.tokenizer.obtain import load_path

    first = tokenizer_config_of(tokenizer, tmp_path)
    folder = tmp_path / "tokenizers" / f"checkpoint-{tokenizer.digest()}"
    assert first.path == str(folder)
    if how == "vocab_cut":
        data = (folder / "vocab.json").read_bytes()
        (folder / "vocab.json").write_bytes(data[: len(data) // 2])
    elif how == "merges_empty":
        (folder / "merges.txt").write_bytes(b"")
    elif how == "config_empty":
        (folder / "tokenizer_config.json").write_bytes(b"")
    elif how == "merges_a_directory":
        (folder / "merges.txt").unlink()
        (folder / "merges.txt").mkdir()
    else:
        shutil.rmtree(folder)
        folder.write_text("x")
    caplog.set_level(logging.WARNING)
    again = tokenizer_config_of(tokenizer, tmp_path)
    assert again.path == str(folder)
    assert load_path(folder).digest() == tokenizer.digest()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith(f"{folder}: a damaged copy"), said
    assert sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".")) == []
    caplog.clear()
    tokenizer_config_of(tokenizer, tmp_path)  # whole again: read as it is
    assert not caplog.records
