"""Building both token stores: round trip, split, parallel encoding, bad inputs."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from helpers.stores import VOCAB, data_config, decoded, documents, prepare, write_corpus
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store import build
from packlm.data.store.corpus import Corpus
from packlm.data.store.prepared import prepare_stores
from packlm.data.store.sources import SourceError
from packlm.errors import ConfigError


def test_store_decodes_back_to_exactly_the_source_documents(tmp_path):
    texts = write_corpus(tmp_path / "src")
    prepared = prepare(tmp_path / "src", tmp_path / "cache")
    train, val = decoded(prepared, "train"), decoded(prepared, "val")
    assert sorted(train + val) == sorted(texts)
    corpus = Corpus.from_config(data_config(tmp_path / "src"))
    assert train == [
        t for t in texts if not corpus.goes_to_validation(t.encode())
    ]  # source order kept
    assert "a special string <|endoftext|> inside, and <|pad|> too" in train + val

    store = prepared.open("train")
    tok = prepared.tokenizer
    assert store.eos_id == tok.special_token_ids["<|endoftext|>"] != store.pad_id
    assert store.pad_id == tok.special_token_ids["<|pad|>"]
    counts = store.manifest["counts"]
    assert counts["documents"] == store.n_docs == len(train)
    assert counts["tokens"] == store.n_tokens == len(store.tokens)
    assert counts["bytes"] == sum(len(t.encode()) for t in train)
    assert [s["name"] for s in store.manifest["sources"]] == [
        str(tmp_path / "src" / "*.txt"),
        str(tmp_path / "src" / "c.jsonl"),
    ]
    fp = prepared.train_manifest["fingerprint"]["data.sources"]
    assert [s["read"] for s in store.manifest["sources"]] == [
        {k: s[k] for k in ("files", "bytes", "digest")} for s in fp
    ]  # what was read is what the fingerprint names
    ids = [store.doc_id(d) for d in range(store.n_docs)]
    assert ids[0] == f"0:{tmp_path}/src/a.txt:0" and len(set(ids)) == len(ids)
    jsonl = [d for d in range(store.n_docs) if ":" in ids[d] and "c.jsonl" in ids[d]]
    assert jsonl and all(store.doc_sources[d] == 1 for d in jsonl)


def test_split_is_stable_disjoint_and_independent_of_paths(tmp_path):
    texts = write_corpus(tmp_path / "one")
    first = prepare(tmp_path / "one", tmp_path / "cache1")
    # The same documents under other names, other files and another order.
    other = tmp_path / "two"
    other.mkdir()
    (other / "z.txt").write_text("\n\n".join(reversed(texts)), encoding="utf-8")
    (other / "c.jsonl").write_text("", encoding="utf-8")
    second = prepare(other, tmp_path / "cache2")
    val1, val2 = decoded(first, "val"), decoded(second, "val")
    assert sorted(val1) == sorted(val2) and 0 < len(val1) < len(texts) / 2
    assert not set(val1) & set(decoded(first, "train"))


def test_explicit_val_sources_drop_exact_duplicates_of_training(tmp_path):
    texts = write_corpus(tmp_path / "src")
    (tmp_path / "val.txt").write_text(
        "\n\n".join([texts[0], "a fresh document", texts[5]]), encoding="utf-8"
    )
    prepared = prepare(
        tmp_path / "src",
        tmp_path / "cache",
        val_sources=[{"path": str(tmp_path / "val.txt"), "weight": 3}],
    )
    assert decoded(prepared, "val") == ["a fresh document"]
    assert sorted(decoded(prepared, "train")) == sorted(texts)  # no hash split with val_sources
    manifest = prepared.val_manifest
    assert manifest["counts"]["dropped"]["duplicate_of_train"] == 2
    assert [s["name"] for s in manifest["sources"]] == [str(tmp_path / "val.txt")]
    assert manifest["sources"][0]["read"]["bytes"] == (tmp_path / "val.txt").stat().st_size
    assert prepared.open("val").doc_id(0) == f"0:{tmp_path}/val.txt:1"


def test_parallel_build_equals_the_in_process_build(tmp_path, monkeypatch):
    write_corpus(tmp_path / "src", n=120)
    monkeypatch.setattr(build, "CHUNK_BYTES", 300)  # many chunks in flight
    config = data_config(tmp_path / "src")
    tok = TokenizerConfig(vocab_size=VOCAB)
    serial = prepare_stores(config, tok, tmp_path / "c1", progress=False, num_workers=0)
    parallel = prepare_stores(config, tok, tmp_path / "c2", progress=False, num_workers=2)
    for split in ("train", "val"):
        a, b = serial.open(split), parallel.open(split)
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.doc_offsets, b.doc_offsets)
        assert np.array_equal(a.doc_sources, b.doc_sources)
        assert [a.doc_id(d) for d in range(a.n_docs)] == [b.doc_id(d) for d in range(b.n_docs)]


def test_tokenizer_is_trained_on_the_training_split_only(tmp_path, monkeypatch):
    import packlm.tokenizer

    write_corpus(tmp_path / "src")
    seen: list[str] = []
    real = packlm.tokenizer.train_bpe_from_iterator

    def spy(documents, *args, **kwargs):
        return real((seen.append(d) or d for d in documents), *args, **kwargs)

    monkeypatch.setattr(packlm.tokenizer, "train_bpe_from_iterator", spy)
    prepared = prepare(tmp_path / "src", tmp_path / "cache")
    assert seen == decoded(prepared, "train")


def test_tokenizer_path_is_loaded_not_trained(tmp_path, monkeypatch):
    import packlm.tokenizer

    write_corpus(tmp_path / "src")
    first = prepare(tmp_path / "src", tmp_path / "cache")
    saved = tmp_path / "tok"
    first.tokenizer.save(saved)
    monkeypatch.setattr(
        packlm.tokenizer, "train_bpe_from_iterator", None
    )  # any training would fail
    loaded = prepare(tmp_path / "src", tmp_path / "cache2", TokenizerConfig(path=str(saved)))
    assert loaded.tokenizer_dir == saved
    assert loaded.tokenizer.digest() == first.tokenizer.digest()
    assert np.array_equal(loaded.open("train").tokens, first.open("train").tokens)


def test_encoding_error_policies_land_in_the_manifest(tmp_path):
    write_corpus(tmp_path / "src")
    with open(tmp_path / "src" / "b.txt", "ab") as f:
        f.write(b"\n\nbroken \xc3\x28 bytes")
    with pytest.raises(SourceError, match=r"b\.txt: not valid UTF-8 at byte offset \d+"):
        prepare(tmp_path / "src", tmp_path / "cache")
    replaced = prepare(tmp_path / "src", tmp_path / "cache", encoding_errors="replace")
    skipped = prepare(tmp_path / "src", tmp_path / "cache", encoding_errors="skip")
    assert replaced.train_manifest["counts"]["replaced_invalid_utf8"] == 1
    assert "broken \ufffd( bytes" in decoded(replaced, "train") + decoded(replaced, "val")
    assert skipped.train_manifest["counts"]["dropped"]["invalid_utf8"] == 1
    assert documents(replaced) == documents(skipped) + 1


def test_a_corpus_without_documents_is_an_error(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("\n\n\n\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"data\.sources=.*: no training documents \(3 empty"):
        prepare_stores(
            DataConfig(sources=[str(tmp_path / "src" / "a.txt")], separator="\n\n"),
            TokenizerConfig(vocab_size=VOCAB),
            tmp_path / "cache",
            progress=False,
        )


def test_an_empty_validation_split_is_an_error(tmp_path):
    texts = write_corpus(tmp_path / "src", n=4)
    with pytest.raises(
        SourceError, match=r"data\.val_fraction=1e-09: the validation split is empty"
    ):
        prepare(tmp_path / "src", tmp_path / "cache", val_fraction=1e-9)
    (tmp_path / "dup.txt").write_text(texts[1], encoding="utf-8")
    with pytest.raises(SourceError, match=r"data\.val_sources=.*empty \(1 duplicates of training"):
        prepare(tmp_path / "src", tmp_path / "cache", val_sources=[str(tmp_path / "dup.txt")])
    off = prepare(tmp_path / "src", tmp_path / "cache", val_fraction=0.0)  # validation switched off
    assert off.open("val").n_docs == 0 and len(decoded(off, "train")) == len(texts)


def test_pad_token_is_required(tmp_path):
    write_corpus(tmp_path / "src")
    tok = TokenizerConfig(vocab_size=VOCAB, special_tokens=["<|endoftext|>"])
    with pytest.raises(
        ConfigError,
        match=r"^tokenizer\.special_tokens=\['<\|endoftext\|>'\]: must include '<\|pad\|>'",
    ):
        prepare(tmp_path / "src", tmp_path / "cache", tok)


def test_a_failed_build_loses_nothing_already_written(tmp_path):
    write_corpus(tmp_path / "src")
    good = prepare(tmp_path / "src", tmp_path / "cache")
    before = good.open("train").tokens.copy()
    (tmp_path / "src" / "z.txt").write_bytes(b"fine\n\nnot \xff fine")
    with pytest.raises(SourceError, match="z.txt: not valid UTF-8 at byte offset 10"):
        prepare(tmp_path / "src", tmp_path / "cache")
    assert np.array_equal(good.open("train").tokens, before)
    leftovers = [
        p.name for p in (tmp_path / "cache").rglob(".*") if ".tmp-" in p.name or ".old-" in p.name
    ]
    assert leftovers == []
    shutil.rmtree(tmp_path / "src")
    with pytest.raises(SourceError, match=r"data\.sources\[0\]=.*: the glob matched no files"):
        prepare(tmp_path / "src", tmp_path / "cache")
