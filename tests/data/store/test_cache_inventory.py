"""`python -m packlm.cache`: every entry listed with its size and last use, a cache hit dates
its entries, prune removes only what no run used, remove waits for a run building the entry,
and what was removed is rebuilt by the next run that needs it."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from helpers.corpus import write_tiny_corpus
from packlm.cache.__main__ import main
from packlm.cache.lock import locked
from packlm.commands.cache_inventory import entries, remove
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.prepared import prepare_stores

DAY = 86400


def prepare(corpus, cache, vocab):
    data = DataConfig(sources=[f"{corpus}/*.txt"], val_fraction=0.2)
    return prepare_stores(data, TokenizerConfig(vocab_size=vocab), cache, progress=False,
                          num_workers=0)  # fmt: skip


def age(entry_path, days):
    when = time.time() - days * DAY
    os.utime(entry_path, (when, when))


@pytest.fixture
def two_configs(tmp_path):
    corpus = write_tiny_corpus(tmp_path / "corpus", n=20)
    cache = tmp_path / "cache"
    return corpus, cache, prepare(corpus, cache, 300), prepare(corpus, cache, 280)


def test_every_entry_is_listed_with_its_size_and_sources(two_configs):
    _, cache, a, b = two_configs
    found = entries(cache)
    by_path = {e.path: e for e in found}
    assert sorted(e.kind for e in found) == ["store", "store", "tokenizer", "tokenizer"]
    for prepared, vocab in ((a, 300), (b, 280)):
        store = by_path[prepared.train_dir.parent]
        on_disk = sum(p.stat().st_size for p in store.path.rglob("*") if p.is_file())
        assert store.bytes == on_disk > 0
        tokens = prepared.train_manifest["counts"]["tokens"]
        assert f"vocab {vocab}, {tokens:,} training tokens" in store.built_from
        assert store.built_from.startswith("corpus/*.txt")  # the sources, by name
        assert f"vocab {vocab}" in by_path[prepared.tokenizer_dir].built_from


def test_a_hit_dates_its_entries_and_prune_removes_only_the_unused(two_configs, capsys, caplog):
    corpus, cache, a, b = two_configs
    for entry in entries(cache):
        age(entry.path, 40)
    prepare(corpus, cache, 300)  # a run of the first config: its entries are used today
    unused = {e.path for e in entries(cache) if e.unused_days() >= 30}
    assert unused == {b.train_dir.parent, b.tokenizer_dir}

    assert main(["--cache-dir", str(cache), "prune", "--unused-days", "30", "--dry-run"]) == 0
    assert "would remove 2 entries" in capsys.readouterr().out
    before = {e.path for e in entries(cache)}  # with the tables the cached load derived
    assert main(["--cache-dir", str(cache), "prune", "--unused-days", "30"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert {e.path for e in entries(cache)} == before - unused
    assert not b.tokenizer_dir.exists() and not b.train_dir.parent.exists()
    kept = (".lock", ".in-use")  # the locks, and this process's records of the kept entries
    leftovers = [p.name for p in cache.rglob(".*") if not p.name.endswith(kept)]
    assert leftovers == []

    with caplog.at_level(logging.INFO, logger="packlm"):
        again = prepare(corpus, cache, 280)  # the next run that needs it rebuilds it
    assert any("training the tokenizer" in r.getMessage() for r in caplog.records)
    assert again.train_manifest["counts"] == b.train_manifest["counts"]


def test_remove_waits_for_a_run_building_the_entry(two_configs):
    _, cache, a, _ = two_configs
    store = next(e for e in entries(cache) if e.path == a.train_dir.parent)
    held, release = threading.Event(), threading.Event()

    def builder():
        with locked(store.path):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=builder)
    thread.start()
    held.wait(5)
    threading.Timer(0.5, release.set).start()
    start = time.monotonic()
    remove(store)
    assert time.monotonic() - start >= 0.4  # not before the builder let go
    thread.join()
    assert not store.path.exists()


def test_names_are_taken_by_unique_prefix_and_a_wrong_one_is_named(two_configs, capsys):
    _, cache, a, _ = two_configs
    name = a.train_dir.parent.name
    with pytest.raises(SystemExit) as exit_info:
        main(["--cache-dir", str(cache), "remove", "zz-no-such"])
    assert exit_info.value.code == 2
    assert "'zz-no-such': no entry in" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--cache-dir", str(cache), "remove", ""])  # every entry matches: refused
    assert "4 entries" in capsys.readouterr().err
    assert main(["--cache-dir", str(cache), "remove", name[:6]]) == 0
    assert not a.train_dir.parent.exists() and len(entries(cache)) == 3
    capsys.readouterr()
    assert main(["--cache-dir", str(cache)]) == 0
    listing = capsys.readouterr().out
    assert listing.count("\n") == 5 and "total" in listing  # header, 3 entries, total


def test_prune_to_a_size_removes_the_least_recently_used_until_the_rest_fits(two_configs, capsys):
    _, cache, a, b = two_configs
    for i, entry in enumerate(sorted(entries(cache), key=lambda e: e.path.name)):
        age(entry.path, 10 + i)  # distinct last uses, none recent
    found = entries(cache)  # oldest-used first
    total = sum(e.bytes for e in found)
    keep = total - found[0].bytes - found[1].bytes + 1  # bytes: the two oldest must go
    gb = str(keep / 2**30)
    assert main(["--cache-dir", str(cache), "prune", "--max-gb", gb, "--dry-run"]) == 0
    assert "would remove 2 entries" in capsys.readouterr().out
    assert main(["--cache-dir", str(cache), "prune", "--max-gb", gb]) == 0
    left = entries(cache)
    assert {e.path for e in left} == {e.path for e in found[2:]}
    assert sum(e.bytes for e in left) <= keep
    # both reasons: what is unused for a day goes first, then by size (nothing more here)
    assert main(["--cache-dir", str(cache), "prune", "--max-gb", "1", "--unused-days", "10.5"]) == 0
    assert {e.path for e in entries(cache)} == {e.path for e in left if e.unused_days() < 10.5}
    with pytest.raises(SystemExit) as exit_info:
        main(["--cache-dir", str(cache), "prune"])
    assert exit_info.value.code == 2 and "--unused-days N, --max-gb G" in capsys.readouterr().err
