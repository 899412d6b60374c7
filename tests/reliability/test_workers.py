"""Worker processes: workers die with their parent (their locks: test_locks.py), and a
dead worker is an error naming the phase and the signal, never a hang.

The random kills of whole runs (parent or worker, every phase) are in test_fault_injection.py.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from helpers.corpus import write_tiny_corpus
from helpers.processes import still_running
from helpers.stores import prepare_tiny
from packlm.data.store import build as build_module
from packlm.data.store.encode import OrderedEncoder
from packlm.runtime import workers
from packlm.tokenizer.training import counting
from packlm.tokenizer.training.counting import WorkerDied, count_parallel


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


PARENT = """
import itertools, os, signal, sys, time
import numpy as np
kind = sys.argv[1]
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (not a background job)

def texts():
    for i in itertools.count():
        if i == 40:
            print("workers", flush=True)
        yield "the quick brown fox %d jumps " % i * 2000

if kind == "count":
    from packlm.tokenizer.training.counting import count_parallel
    count_parallel(texts(), r"\\w+| ?[^\\s\\w]+|\\s+", [], 2)
else:
    from packlm.data.store.encode import OrderedEncoder
    class Tok:
        def encode_ordinary(self, t):
            return [ord(c) for c in t]
    with OrderedEncoder(Tok(), 0, np.uint32, 2) as enc:
        for i, t in enumerate(texts()):
            for _ in enc.submit([t], i):
                pass
"""


@pytest.mark.parametrize("kind", ["count", "encode"])
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_workers_die_with_their_parent_however_it_ends(kind, signum):
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT), kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert parent.stdout.readline() == "workers\n"
        workers = [c.pid for c in psutil.Process(parent.pid).children()]
        assert len(workers) >= 2
        parent.send_signal(signum)
        parent.wait(timeout=10)
        assert still_running(workers) == []
    finally:
        parent.kill()
        parent.wait()


# --- a dead worker is an error, never a hang --------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_pretokenizer_worker_is_an_error_naming_the_phase_and_signal(signum):
    before = {p.pid for p in multiprocessing.active_children()}

    def texts():
        for i in range(10_000):
            if i == 50:
                victim = next(p for p in multiprocessing.active_children() if p.pid not in before)
                os.kill(victim.pid, signum)
            yield f"some words and more words {i} " * 2000

    start = time.monotonic()
    name = signal.Signals(signum).name
    expected = rf"{re.escape(counting.PHASE)}: worker process \d+ was killed by {name}"
    with pytest.raises(WorkerDied, match=expected):
        count_parallel(texts(), r"\w+|\s+", [], 2)
    assert time.monotonic() - start < 15
    assert {p.pid for p in multiprocessing.active_children()} <= before


def test_a_killed_encode_worker_fails_the_build_which_the_next_run_redoes(tmp_path, monkeypatch):
    corpus = write_tiny_corpus(tmp_path / "corpus", n=400)
    cache = tmp_path / "cache"
    monkeypatch.setattr(build_module, "CHUNK_BYTES", 2000)
    real = OrderedEncoder.submit
    calls = []

    def submit(self, texts, tag):
        calls.append(1)
        if len(calls) == 5:
            os.kill(next(iter(self._procs)), signal.SIGKILL)
        return real(self, texts, tag)

    def prepare():
        return prepare_tiny(corpus, cache, num_workers=2)

    monkeypatch.setattr(OrderedEncoder, "submit", submit)
    start = time.monotonic()
    with pytest.raises(
        WorkerDied, match=r"encoding the token store: worker process \d+ was killed by SIGKILL"
    ):
        prepare()
    assert time.monotonic() - start < 30
    assert [p.name for p in (cache / "stores").iterdir() if not p.name.endswith(".lock")] == []
    monkeypatch.setattr(OrderedEncoder, "submit", real)
    data = prepare()
    assert data.open("train").n_docs + data.open("val").n_docs == 400


def test_a_worker_started_after_its_parent_died_exits_at_once():
    """The race before prctl takes effect: a worker whose parent is already gone exits."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: pretend the parent is another process, which is gone
        os.close(r)
        try:
            workers.die_with_parent(dead_pid())
        finally:
            os.write(w, b"survived")
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 100) == b"" and os.waitstatus_to_exitcode(status) == 1
    os.close(r)


def test_prctl_is_set_in_a_worker():
    """Linux: PR_GET_PDEATHSIG in a worker is SIGKILL (the kernel kills it with the parent)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()

    def child(parent):
        import ctypes

        workers.die_with_parent(parent)
        value = ctypes.c_int()
        ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
        queue.put(value.value)

    p = ctx.Process(target=child, args=(os.getpid(),))
    p.start()
    assert queue.get() == signal.SIGKILL
    p.join()
