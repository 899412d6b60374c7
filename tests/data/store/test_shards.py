"""Preparation in shards (data.shard=i/N, data.shards=N) and tokenizer.sample_bytes.

Four shard stores read as one corpus are one store of the whole corpus: the same documents,
tokens, sources and ids, so the same epoch plans and the same batches.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.corpus import write_tiny_corpus
from helpers.stores import assert_same_plans_and_batches
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.prepared import prepare_stores
from packlm.data.store.shards import file_shards
from packlm.data.store.token_store import StoreError
from packlm.data.store.union import ConcatArray
from packlm.errors import ConfigError

SRC = Path(__file__).resolve().parents[3] / "src"
TOKENIZER = TokenizerConfig(vocab_size=300)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"))


def config(corpus: Path, **keys) -> DataConfig:
    return DataConfig(**{"sources": [f"{corpus}/*.txt"], "val_fraction": 0.2, **keys})


def prepare(data: DataConfig, cache: Path, tokenizer: TokenizerConfig = TOKENIZER, **kw):
    return prepare_stores(data, tokenizer, cache, progress=False, num_workers=0, **kw)


@pytest.fixture(scope="module")
def stores(corpus, tmp_path_factory):
    """(one store, the union of four shards built one by one), in one cache."""
    cache = tmp_path_factory.mktemp("cache")
    one = prepare(config(corpus), cache)
    for i in range(4):
        prepare(config(corpus, shard=f"{i}/4"), cache)
    return one, prepare(config(corpus, shards=4), cache), cache


@pytest.mark.parametrize("split", ["train", "val"])
def test_four_shards_hold_the_documents_and_tokens_of_one_store(stores, split):
    one, shards, _ = stores
    a, b = one.open(split), shards.open(split)
    assert isinstance(b.path, tuple) and len(b.path) == 4
    assert max(p.n_docs for p in b.parts) < a.n_docs  # really split
    assert (a.n_docs, a.n_tokens) == (b.n_docs, b.n_tokens) and a.n_docs > 0
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_array_equal(a.doc_offsets, b.doc_offsets)
    np.testing.assert_array_equal(a.doc_sources, b.doc_sources)
    assert [a.doc_id(d) for d in range(a.n_docs)] == [b.doc_id(d) for d in range(b.n_docs)]
    for d in (0, a.n_docs // 2, a.n_docs - 1):
        np.testing.assert_array_equal(a.document(d), b.document(d))
    counts = ("documents", "tokens", "bytes", "stored_bytes")
    assert {k: a.manifest["counts"][k] for k in counts} == {
        k: b.manifest["counts"][k] for k in counts
    }
    assert a.manifest["counts"]["dropped"] == b.manifest["counts"]["dropped"]


def test_the_cache_listing_names_each_shard(stores):
    from packlm.commands.cache_inventory import entries

    built = [e.built_from for e in entries(stores[2]) if e.kind == "store"]
    shards = sorted(b.rsplit(", ", 1)[-1] for b in built if "shard" in b)
    assert shards == ["shard 0/4", "shard 1/4", "shard 2/4", "shard 3/4"]
    assert len(built) == 5  # and the one store


def test_concatenated_arrays_read_like_one_array():
    parts = [np.arange(0, 5), np.zeros(0, np.int64), np.arange(5, 9), np.arange(9, 12)]
    view, whole = ConcatArray(parts), np.arange(12)
    index = np.array([[0, 4, 5], [8, 9, 11]])
    np.testing.assert_array_equal(view[index], whole[index])
    for s in (slice(2, 4), slice(3, 10), slice(0, 12, 3), slice(7, 7), slice(-3, None)):
        np.testing.assert_array_equal(view[s], whole[s])
    assert view[5] == 5 and view[-1] == 11 and len(view) == 12
    with pytest.raises(IndexError):
        view[np.array([12])]
    shifted = ConcatArray([np.arange(3), np.arange(2)], shifts=[0, 10])  # offsets of two shards
    assert np.asarray(shifted).tolist() == [0, 1, 2, 10, 11] and shifted[1:4].tolist() == [1, 2, 10]


@pytest.mark.parametrize(
    "keys",
    [
        dict(window=16, stride=12),
        dict(window=16, stride=8, snap="paragraph", snap_tolerance=4, group_by="source",
             pack_size=40, pack_strategy="best_fit", pack_buffer=8, bos=True),
    ],
)  # fmt: skip
def test_the_epoch_plans_and_batches_of_four_shards_are_one_stores(stores, keys):
    one, shards, cache = stores
    assert_same_plans_and_batches(one, shards, cache, **keys)


@pytest.mark.parametrize("fmt", ["nanogpt", "megatron"])
def test_exports_of_four_shards_are_one_stores_files(stores, tmp_path, fmt):
    from packlm.commands.export.megatron import export_megatron
    from packlm.commands.export.nanogpt import export_nanogpt

    export = {"nanogpt": export_nanogpt, "megatron": export_megatron}[fmt]
    files = {}
    for name, prepared in zip(("one", "shards"), stores[:2], strict=True):
        out = tmp_path / name
        out.mkdir()
        export({s: prepared.open(s) for s in ("train", "val")}, prepared.tokenizer, out)
        files[name] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert files["one"] == files["shards"] and len(files["one"]) >= 2


def test_a_missing_shard_is_named_with_the_command_that_builds_it(corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with pytest.raises(StoreError, match=r"0/3 \(not built: no tokenizer yet\); 1/3"):
        prepare(config(corpus, shards=3), tmp_path)  # a reader never trains the tokenizer
    assert not any("training" in r.getMessage() for r in caplog.records)
    prepare(config(corpus, shard="0/3"), tmp_path)
    prepare(config(corpus, shard="2/3"), tmp_path)
    with pytest.raises(StoreError, match=r"data\.shards=3: 1 of the shard stores") as e:
        prepare(config(corpus, shards=3), tmp_path)
    assert "1/3 (not built)" in str(e.value)
    assert "python -m packlm.prepare -m data.shard=1/3" in str(e.value)
    # prepare's own call builds what is missing, then reads the three as one
    built = prepare(config(corpus, shards=3), tmp_path, build_shards=True)
    assert len(built.train_dir) == 3
    assert built.open("train").n_docs + built.open("val").n_docs == 60
    damaged = built.train_dir[2] / "tokens.bin"
    damaged.write_bytes(bytes(damaged.stat().st_size))  # same size, other content
    with pytest.raises(StoreError, match=r"2/3 \(the cached store is damaged \(") as e:
        prepare(config(corpus, shards=3), tmp_path)
    assert "rebuilding" not in str(e.value) and "data.shard=2/3`" in str(e.value)


@pytest.mark.parametrize(
    "keys, message",
    [
        (dict(shard="4/4"), r"^data\.shard='4/4': expected \"i/N\""),
        (dict(shard="a/4"), r"^data\.shard='a/4'"),
        (dict(shard="1"), r"^data\.shard='1'"),
        (dict(shard=1), r"^data\.shard=1:"),
        (dict(shard="0/0"), r"^data\.shard='0/0'"),
        (dict(shards=0), r"^data\.shards=0: must be a positive integer"),
        (dict(shard="1/4", shards=3), r"^data\.shard=1/4: a shard of 4, but data\.shards=3"),
    ],
)
def test_invalid_shard_keys_fail_naming_the_key(keys, message):
    with pytest.raises(ConfigError, match=message):
        DataConfig(**keys).validate()


def test_more_shards_than_files_that_cannot_be_cut_leave_a_shard_empty_and_say_so(tmp_path, caplog):
    """Three text files without data.separator (one document each) in four shards: no file
    is cut (tests/data/store/test_shards_in_one_file.py cuts files that can be), one shard
    builds an empty store, the log says which and why, and the union is one store."""
    corpus = write_tiny_corpus(tmp_path / "three", n=3)
    caplog.set_level(logging.INFO)
    union = prepare(config(corpus, shards=4, val_fraction=0.0), tmp_path / "cache",
                    build_shards=True)  # fmt: skip
    one = prepare(config(corpus, val_fraction=0.0), tmp_path / "cache")
    said = [r.getMessage() for r in caplog.records if "data.shard: " in r.getMessage()]
    assert any("is one document (no data.separator), so it cannot be cut" in m for m in said)
    assert any(m.startswith("data.shard: 1/4 read nothing") for m in said), said
    assert [p.n_docs for p in union.open("train").parts] == [1, 0, 1, 1]
    np.testing.assert_array_equal(np.asarray(one.open("train").tokens),
                                  np.asarray(union.open("train").tokens))  # fmt: skip


def test_shards_are_contiguous_balanced_and_never_empty():
    owner = file_shards(np.array([1, 1, 1, 1, 1, 1, 1, 100]), 4)
    assert owner.tolist() == [0, 0, 0, 0, 0, 1, 2, 3]  # the big file alone in the last
    assert file_shards(np.ones(10, np.int64), 4).tolist() == [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]
    assert file_shards(np.array([100, 1, 1, 1, 1]), 4).tolist() == [0, 1, 2, 3, 3]


def test_explicit_validation_sources_lose_the_same_duplicates_as_one_store(corpus, tmp_path):
    last = sorted(corpus.glob("*.txt"))[-1]  # in the last shard: shard 0 must still drop it
    val = tmp_path / "val"
    val.mkdir()
    (val / "dup.txt").write_text(last.read_text(encoding="utf-8"), encoding="utf-8")
    (val / "own.txt").write_text("a held out document of its own.\n", encoding="utf-8")
    data = dict(val_sources=[str(val)], val_fraction=0.0)
    one = prepare(config(corpus, **data), tmp_path / "cache")
    shards = prepare(config(corpus, shards=4, **data), tmp_path / "cache", build_shards=True)
    a, b = one.open("val"), shards.open("val")
    assert a.n_docs == b.n_docs == 1
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    assert b.manifest["counts"]["dropped"]["duplicate_of_train"] == 1
    assert [p.n_docs for p in b.parts] == [1, 0, 0, 0]  # validation lives in shard 0
    np.testing.assert_array_equal(np.asarray(one.open("train").tokens),
                                  np.asarray(shards.open("train").tokens))  # fmt: skip


def test_sample_bytes_trains_on_a_logged_prefix_and_keys_the_cache(corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="packlm.tokenizer")
    full = prepare(config(corpus), tmp_path)
    sample = TokenizerConfig(vocab_size=300, sample_bytes=2000)
    small = prepare(config(corpus), tmp_path, sample)
    lines = [r.getMessage() for r in caplog.records if "trained on the first" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "sample_bytes=2,000: trained on the first 2,000 bytes of about 11,211" in lines[0]
    assert "documents, the last one cut" in lines[0]
    assert small.tokenizer_dir != full.tokenizer_dir
    assert small.tokenizer.digest() != full.tokenizer.digest()  # fewer bytes, other merges
    # a sample of at least the whole split trains the same tokenizer, under its own key
    everything = prepare(config(corpus), tmp_path, TokenizerConfig(vocab_size=300,
                                                                   sample_bytes=10**9))  # fmt: skip
    assert everything.tokenizer_dir not in (full.tokenizer_dir, small.tokenizer_dir)
    assert everything.tokenizer.digest() == full.tokenizer.digest()
    with pytest.raises(ConfigError, match=r"^tokenizer\.sample_bytes=0: must be a positive"):
        TokenizerConfig(sample_bytes=0).validate()


def test_shards_built_by_two_processes_at_once_share_one_tokenizer(corpus, tmp_path):
    """As a multirun on two machines sharing cache_dir: the tokenizer is trained once (the
    other process waits on its lock and loads it), and the two shards read as one store."""
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    args = [sys.executable, "-m", "packlm.prepare", f"data.sources=[{corpus}/*.txt]",
            "data.val_fraction=0.2", "tokenizer.vocab_size=300", f"cache_dir={cache}"]  # fmt: skip
    procs = [
        subprocess.Popen([*args, f"data.shard={i}/2"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        for i in range(2)
    ]  # fmt: skip
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert sum(e.count("training the tokenizer") for e in errs) == 1, errs
    shards = prepare(config(corpus, shards=2), cache)
    one = prepare(config(corpus), cache)
    for split in ("train", "val"):
        a, b = one.open(split), shards.open(split)
        np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
        np.testing.assert_array_equal(a.doc_offsets, b.doc_offsets)
