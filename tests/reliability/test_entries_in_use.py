"""Entries in use: `python -m packlm.cache remove` refuses an entry a live run opened, naming
the run, and `prune` skips it; once the run ends (or dies, leaving a forked worker behind)
the entry is removed (issue 33: before, the run died at its next validation)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest

from helpers.corpus import write_tiny_corpus
from helpers.processes import still_running
from packlm.cache import hold as cache_hold
from packlm.cache.__main__ import main
from packlm.cache.hold import EntryInUse, hold, in_use_dir
from packlm.commands import cache_inventory as inventory
from packlm.commands.cache_inventory import entries, remove
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.prepared import prepare_stores

HOLDER = """\
import os, sys, time
from packlm.config.data import DataConfig
from packlm.data.store.prepared import prepare_stores
from packlm.config.tokenizer import TokenizerConfig

corpus, cache, vocab, fork = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "fork"
data = DataConfig(sources=[corpus + "/*.txt"], val_fraction=0.2)
prepare_stores(data, TokenizerConfig(vocab_size=vocab), cache, progress=False, num_workers=0)
if fork and os.fork() == 0:  # a DataLoader worker, say: outlives a SIGKILLed parent
    time.sleep(60)
    os._exit(0)
print("ready", flush=True)
sys.stdin.read()  # until the test closes it
"""


def prepare(corpus, cache, vocab):
    data = DataConfig(sources=[f"{corpus}/*.txt"], val_fraction=0.2)
    return prepare_stores(data, TokenizerConfig(vocab_size=vocab), cache, progress=False,
                          num_workers=0)  # fmt: skip


@pytest.fixture
def cache_of_two(tmp_path):
    corpus = write_tiny_corpus(tmp_path / "corpus", n=20)
    cache = tmp_path / "cache"
    return corpus, cache, prepare(corpus, cache, 300), prepare(corpus, cache, 280)


def start_holder(tmp_path, corpus, cache, vocab=300, fork=False) -> subprocess.Popen:
    script = tmp_path / "holder_run.py"
    script.write_text(HOLDER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(corpus), str(cache), str(vocab), "fork" if fork else ""],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_remove_refuses_an_entry_a_live_run_holds_naming_it_then_removes_it(
    tmp_path, cache_of_two, capsys
):
    corpus, cache, a, _ = cache_of_two
    store, tok = a.train_dir.parent, a.tokenizer_dir
    holder = start_holder(tmp_path, corpus, cache)
    try:
        assert main(["--cache-dir", str(cache), "remove", store.name, tok.name]) == 1
        err = capsys.readouterr().err
        for path in (store, tok):
            assert f"error: {path}: in use by process {holder.pid} (" in err
        assert "holder_run.py" in err  # its command line
        assert store.is_dir() and tok.is_dir()
        assert len(a.open("val").tokens) == a.val_manifest["counts"]["tokens"]
    finally:
        holder.stdin.close()
        holder.wait(30)
    records = [p.name for p in in_use_dir(store).glob("*.json")]
    assert not [r for r in records if r.endswith(f"-{holder.pid}.json")]  # released at its exit
    assert main(["--cache-dir", str(cache), "remove", store.name, tok.name]) == 0
    assert not store.exists() and not tok.exists()


def test_prune_skips_an_entry_in_use_and_removes_the_rest(tmp_path, cache_of_two, capsys):
    corpus, cache, a, b = cache_of_two
    holder = start_holder(tmp_path, corpus, cache)
    try:
        assert main(["--cache-dir", str(cache), "prune", "--unused-days", "0"]) == 0
        out = capsys.readouterr().out
        assert f"skipping {a.train_dir.parent}: in use by process {holder.pid}" in out
        assert a.train_dir.parent.is_dir() and a.tokenizer_dir.is_dir()
        assert not b.train_dir.parent.exists() and not b.tokenizer_dir.exists()
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_a_killed_run_holds_nothing_though_its_forked_worker_lives(tmp_path, cache_of_two):
    corpus, cache, a, _ = cache_of_two
    store = a.train_dir.parent
    holder = start_holder(tmp_path, corpus, cache, fork=True)
    workers = _children(holder.pid)
    assert len(workers) == 1
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    try:
        assert still_running(workers, 0) == workers  # the orphan lives on
        assert list(in_use_dir(store).glob(f"*-{holder.pid}.json"))  # the dead run's record
        (found,) = (e for e in entries(cache) if e.path == store)
        remove(found)  # the record's owner is dead: nothing holds the entry
        assert not store.exists() and not in_use_dir(store).exists()
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGKILL)


def test_a_run_that_opens_the_entry_while_it_is_removed_keeps_it(cache_of_two, monkeypatch):
    """remove renames the entry aside, then looks for readers once more: one found puts it back."""
    _, cache, a, _ = cache_of_two
    (found,) = (e for e in entries(cache) if e.path == a.train_dir.parent)
    late = {"pid": 4711, "host": "elsewhere", "command": "python train.py"}
    monkeypatch.setattr(inventory, "holders", lambda path: [late])
    with pytest.raises(EntryInUse, match="in use by process 4711 on elsewhere"):
        remove(found)
    assert found.path.is_dir() and not list(found.path.parent.glob(".*.old-*"))
    assert len(a.open("train").tokens) == a.train_manifest["counts"]["tokens"]


def test_hold_of_an_entry_removed_meanwhile_is_an_error_naming_it(tmp_path):
    gone = tmp_path / "stores" / "0123456789abcdef"
    gone.parent.mkdir()
    with pytest.raises(FileNotFoundError, match=f"{gone}: removed .* while this run opened it"):
        hold(gone)
    assert not in_use_dir(gone).exists() and gone not in cache_hold._holds


def test_a_run_that_ends_clears_the_records_of_runs_killed_while_they_held_the_entry(tmp_path):
    """A killed run leaves its record (nothing of it runs at its death); the next run to hold
    and release the entry drops it with its own, so the kill leaves no folder behind."""
    entry = tmp_path / "stores" / "0123456789abcdef"
    entry.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = in_use_dir(entry) / f"{socket.gethostname()}-{dead.stdout.strip()}.json"
    stale.parent.mkdir()
    stale.write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    other_host = in_use_dir(entry) / "elsewhere-4711.json"  # cannot be told dead: kept
    other_host.write_text(json.dumps({"pid": 4711, "host": "elsewhere"}))
    hold(entry).release()
    assert not stale.exists() and other_host.exists()
    other_host.unlink()
    hold(entry).release()
    assert not in_use_dir(entry).exists()


def _children(pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(pid).children()]
