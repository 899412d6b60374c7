"""Crash-safe caches: a killed tokenizer training or store build is never read, the next run
rebuilds or reuses a complete entry, and a store edited afterwards is detected and rebuilt.

The SIGKILL-between-the-two-stores case of the store build is in
tests/data/store/test_cache.py::test_a_killed_build_is_never_read_and_the_next_run_completes_it,
truncation in test_prepare.py::test_a_truncated_store_is_detected_and_rebuilt.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.corpus import write_tiny_corpus
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store import token_store as store_module
from packlm.data.store import verify as verify_module
from packlm.data.store.prepared import prepare_stores
from packlm.data.store.token_store import StoreError, TokenStore
from packlm.data.store.verify import verify_checksums, verify_files

VOCAB = 300


def prepare(corpus: Path, cache: Path, vocab: int = VOCAB):
    return prepare_stores(
        DataConfig(sources=[f"{corpus}/*.txt"], val_fraction=0.2),
        TokenizerConfig(vocab_size=vocab),
        cache,
        progress=False,
        num_workers=0,
    )


def messages(caplog) -> list[str]:
    out = [r.getMessage() for r in caplog.records if r.name.startswith("packlm")]
    caplog.clear()
    return out


def entries(cache: Path, kind: str) -> list[str]:
    """Visible (complete-looking) entries of `<cache>/<kind>`; for tokenizers not `tables/`,
    the derived id tables of loads from files (tokenizer/cache.py: with_tables)."""
    root = cache / kind
    if not root.exists():
        return []
    names = (p.name for p in root.iterdir() if not p.name.startswith("."))
    return sorted(n for n in names if not (kind == "tokenizers" and n == "tables"))


def assert_same_data(a, b) -> None:
    assert a.tokenizer.digest() == b.tokenizer.digest()
    for split in ("train", "val"):
        x, y = a.open(split), b.open(split)
        assert np.array_equal(x.tokens, y.tokens) and np.array_equal(x.doc_offsets, y.doc_offsets)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, tiny_corpus):
    """The data of an uninterrupted build: what every recovered cache must equal."""
    return prepare(tiny_corpus, tmp_path_factory.mktemp("clean"))


CHILD = """
import os, signal, sys
from packlm.cache import entry as cache_entry
from packlm.tokenizer import obtain as tokenizer_cache
from packlm.config.data import DataConfig
from packlm.data.store.prepared import prepare_stores
from packlm.tokenizer import formats
import packlm.tokenizer
from packlm.config.tokenizer import TokenizerConfig

point, corpus, cache, vocab = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
die = lambda: os.kill(os.getpid(), signal.SIGKILL)

if point == "training":  # halfway through reading the training texts
    real = packlm.tokenizer.train_bpe_from_iterator
    def dying(texts, *a, **k):
        def stream():
            for i, t in enumerate(texts):
                if i == 20:
                    die()
                yield t
        return real(stream(), *a, **k)
    packlm.tokenizer.train_bpe_from_iterator = dying
elif point == "saving":  # vocab.json written, merges.txt not
    real_write = formats.write_atomic
    calls = []
    def write(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            die()
        return real_write(*a, **k)
    formats.write_atomic = write
elif point == "renaming":  # every file written, the directory not yet renamed into place
    tokenizer_cache.replace_dir = lambda tmp, dest: die()
elif point == "replacing":  # the damaged entry moved aside, the new one not yet in place
    real_replace = os.replace
    def replace(src, dst):
        real_replace(src, dst)
        if ".old-" in str(dst):
            die()
    cache_entry.os.replace = replace
print("ready", flush=True)
prepare_stores(
    DataConfig(sources=[corpus + "/*.txt"], val_fraction=0.2),
    TokenizerConfig(vocab_size=vocab),
    cache,
    progress=False,
    num_workers=0,
)
"""


def child(point: str, corpus: Path, cache: Path, vocab: int = VOCAB) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), point, str(corpus), str(cache), str(vocab)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("point", ["training", "saving", "renaming", "replacing"])
def test_a_killed_tokenizer_training_is_never_read_and_the_next_run_retrains(
    tiny_corpus, clean, tmp_path, caplog, point
):
    cache = tmp_path / "cache"
    if point == "replacing":  # a damaged entry exists and is being replaced
        prepare(tiny_corpus, cache)
        (cache / "tokenizers" / entries(cache, "tokenizers")[0] / "merges.txt").write_text("x y\n")
    proc = child(point, tiny_corpus, cache)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    assert entries(cache, "tokenizers") == []  # nothing a reader would take for a tokenizer
    assert entries(cache, "stores") == (
        [entries(cache, "stores")[0]] if point == "replacing" else []
    )

    caplog.set_level(logging.INFO)
    again = prepare(tiny_corpus, cache)
    logged = messages(caplog)
    assert any(m.startswith("training the tokenizer") for m in logged), logged
    if point != "training":
        assert any(m.startswith("removing") and "interrupted build" in m for m in logged), logged
    assert_same_data(again, clean)
    assert [
        p.name for p in (cache / "tokenizers").iterdir() if ".tmp-" in p.name or ".old-" in p.name
    ] == []


def test_a_changed_cached_tokenizer_is_retrained_with_the_reason(
    tiny_corpus, clean, tmp_path, caplog
):
    cache = tmp_path / "cache"
    prepare(tiny_corpus, cache)
    (name,) = entries(cache, "tokenizers")
    merges = cache / "tokenizers" / name / "merges.txt"
    text = merges.read_text(encoding="utf-8").splitlines()
    merges.write_text("\n".join([text[0], text[2], text[1], *text[3:]]) + "\n", encoding="utf-8")
    caplog.set_level(logging.INFO)
    again = prepare(tiny_corpus, cache)
    (line,) = [m for m in messages(caplog) if m.startswith("training the tokenizer")]
    assert "cannot be loaded" in line and "do not match the digest" in line
    assert_same_data(again, clean)


@pytest.mark.parametrize("name", ["tokens.bin", "doc_ids.txt", "doc_offsets.npy"])
def test_a_store_file_edited_in_place_is_detected_and_rebuilt(
    tiny_corpus, clean, tmp_path, caplog, name
):
    """Same size, different bytes: the size check passes, the manifest checksum does not."""
    cache = tmp_path / "cache"
    first = prepare(tiny_corpus, cache)
    path = first.train_dir / name
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01  # one bit, size unchanged
    path.write_bytes(bytes(data))
    assert verify_files(first.train_dir, first.train_manifest) is None  # sizes still agree
    assert "content changed" in verify_checksums(first.train_dir, first.train_manifest)
    caplog.set_level(logging.INFO)
    again = prepare(tiny_corpus, cache)
    (line,) = [m for m in messages(caplog) if m.startswith("building token stores")]
    assert "damaged" in line and name in line and "content changed since it was written" in line
    assert_same_data(again, clean)
    assert verify_checksums(again.train_dir, again.train_manifest) is None


def test_large_files_are_checksummed_by_sampled_blocks(tmp_path, monkeypatch):
    """Above CHECKSUM_FULL_BYTES only 256 evenly spaced blocks are hashed (first and last
    included): an edit inside a sampled block is detected, one between blocks is not."""
    monkeypatch.setattr(verify_module, "CHECKSUM_FULL_BYTES", 1000)
    monkeypatch.setattr(verify_module, "CHECKSUM_BLOCKS", 4)
    monkeypatch.setattr(verify_module, "CHECKSUM_BLOCK_BYTES", 10)
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(4000))
    before = verify_module.file_checksum(path)
    for offset, detected in [(0, True), (3999, True), (1331, True), (500, False)]:
        data = bytearray(4000)
        data[offset] = 1
        path.write_bytes(bytes(data))
        assert (verify_module.file_checksum(path) != before) == detected, offset


def test_a_full_disk_during_the_store_build_leaves_nothing_and_says_so(
    tiny_corpus, clean, tmp_path, monkeypatch
):
    cache = tmp_path / "cache"
    real = store_module.StoreWriter.add_many

    def add_many(self, ids, *args):
        real(self, ids, *args)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store_module.StoreWriter, "add_many", add_many)
    with pytest.raises(
        OSError, match=r"cannot write the token store .*stores/\w+: No space left on device"
    ) as e:
        prepare(tiny_corpus, cache)
    assert e.value.errno == errno.ENOSPC
    assert list((cache / "stores").iterdir()) == [next((cache / "stores").glob(".*.lock"))]
    monkeypatch.undo()
    assert_same_data(prepare(tiny_corpus, cache), clean)


def test_a_full_disk_while_saving_the_tokenizer_leaves_nothing_and_says_so(
    tiny_corpus, tmp_path, monkeypatch
):
    from packlm.tokenizer import formats

    cache = tmp_path / "cache"
    real = formats.write_atomic
    calls = []

    def write_atomic(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, text)

    monkeypatch.setattr(formats, "write_atomic", write_atomic)
    with pytest.raises(
        OSError, match=r"cannot write the tokenizer cache .*tokenizers/\w+: No space left"
    ):
        prepare(tiny_corpus, cache)
    assert [p.name for p in (cache / "tokenizers").iterdir() if not p.name.endswith(".lock")] == []


# --- kills at random moments (slow) ------------------------------------------------------------


@pytest.fixture(scope="module")
def bigger_corpus(tmp_path_factory):
    """~0.8 MB: tokenizer training plus the store build take a fraction of a second."""
    return write_tiny_corpus(tmp_path_factory.mktemp("bigger"), n=1500, seed=1)


@pytest.mark.slow
def test_kills_at_random_moments_never_leave_a_readable_partial_cache(
    bigger_corpus, tmp_path, caplog
):
    clean_cache = tmp_path / "clean"
    start = time.perf_counter()
    reference = prepare(bigger_corpus, clean_cache, vocab=1000)
    duration = time.perf_counter() - start
    outcomes = []
    for seed in range(8):
        cache = tmp_path / f"cache{seed}"
        for attempt in range(2):  # kill twice in a row: the second run also starts from debris
            proc = child("random", bigger_corpus, cache, vocab=1000)
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(random.Random(seed * 10 + attempt).uniform(0, 1.3 * duration))
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
            outcomes.append(proc.returncode)
            for name in entries(cache, "tokenizers"):  # whatever is visible is complete
                from packlm.tokenizer import Tokenizer

                Tokenizer.load(cache / "tokenizers" / name)
            for name in entries(cache, "stores"):
                for split in ("train", "val"):
                    store_dir = cache / "stores" / name / split
                    s = TokenStore.open(store_dir)
                    assert verify_checksums(store_dir, s.manifest) is None
        assert_same_data(prepare(bigger_corpus, cache, vocab=1000), reference)
    assert outcomes.count(-signal.SIGKILL) >= 8, outcomes  # most kills landed mid-work


def test_store_open_refuses_a_missing_manifest(tmp_path):
    (tmp_path / "s").mkdir()
    with pytest.raises(StoreError, match="no manifest.json; not a complete token store"):
        TokenStore.open(tmp_path / "s")
