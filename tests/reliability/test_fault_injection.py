"""Fault injection (slow): 20 runs of `train.py`, each killed once in a random phase
(pre-tokenizing, merging, store encoding, training, checkpoint write), through a random
victim (the parent, or one worker where the phase has workers) with a random signal
(KILL, TERM, INT); then a rerun (resuming from last.ckpt when there is one).

Each case asserts: the first run ends within a bound (no hang) and leaves no process
behind; the rerun completes within a bound, leaves no temporary in the cache, and its
artefacts equal an undisturbed run's (tokenizer files, store checksums, batch fingerprints,
final weights). With PACKLM_FAULT_REPORT=<file> each case appends its outcome as JSON.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers.corpus import write_tiny_corpus
from helpers.processes import still_running
from helpers.runs import (
    assert_same_weights,
    checkpoint_step,
    reliability_overrides,
    subprocess_env,
    train_command,
)
from packlm.callbacks.batch_hashes import ENV, read_batch_hashes

pytestmark = pytest.mark.slow

STEPS = 8
PHASES = ["pre-tokenizing", "merging", "store encoding", "training", "checkpoint write"]
WITH_WORKERS = {"pre-tokenizing", "store encoding"}
SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]
RUN_BOUND_S = 240  # a whole run (imports, tokenizer, store, 8 steps) on 2 busy cores
END_BOUND_S = 60  # from the signal to the end of the first run

DRIVER = Path(__file__).parents[1] / "helpers" / "fault_driver.py"  # train.py, phases marked


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """About 1.6 MB of text: enough for the parallel pre-tokenizer and store encoder."""
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"), n=8000, seed=1)


def args(corpus: Path, cache: Path, run: Path, *extra: str) -> list[str]:
    return reliability_overrides(
        corpus,
        cache,
        f"trainer.max_steps={STEPS}",
        f"hydra.run.dir={run}",
        "data.val_fraction=0.02",  # a small validation split: validation is not under test
        "trainer.limit_val_batches=4",
        *extra,
    )


def by_step(path: Path) -> dict[int, str]:
    return (
        {step: whole for step, _, _, whole, _ in read_batch_hashes(path)} if path.exists() else {}
    )


def run_train(argv: list[str], cwd: Path, hashes: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        train_command(*argv),
        cwd=cwd,
        env=subprocess_env(**{ENV: str(hashes)}),
        capture_output=True,
        text=True,
        timeout=RUN_BOUND_S,
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus):
    root = tmp_path_factory.mktemp("reference")
    hashes = root / "hashes.txt"
    result = run_train(args(corpus, root / "cache", root / "run"), root, hashes)
    assert result.returncode == 0, result.stderr[-3000:]
    return root, by_step(hashes)


def artefacts(cache: Path) -> dict[str, object]:
    """What a cache holds, by content: tokenizer files and store checksums per entry. Not
    `tokenizers/tables/`: id tables derived from tokenizer files on a load from files (a
    rerun loads what the killed run trained; an undisturbed run never does), checked and
    recomputed when missing or stale."""
    out: dict[str, object] = {}
    for tok in sorted((cache / "tokenizers").glob("[!.]*")):
        if tok.name == "tables":
            continue
        for f in sorted(tok.iterdir()):
            if f.name != "packlm_cache.json":
                out[f"tokenizers/{tok.name}/{f.name}"] = f.read_bytes()
    for store in sorted((cache / "stores").glob("[!.]*")):
        for split in ("train", "val"):
            manifest = json.loads((store / split / "manifest.json").read_text())
            out[f"stores/{store.name}/{split}"] = manifest["checksums"]
    return out


def hidden_debris(cache: Path) -> list[str]:
    return [p.name for p in cache.glob("*/.*") if not p.name.endswith(".lock")]


def tree(pid: int) -> set[int]:
    try:
        p = psutil.Process(pid)
        return {pid, *(c.pid for c in p.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def workers_of(pid: int) -> list[int]:
    children = psutil.Process(pid).children()
    return [c.pid for c in children if "resource_tracker" not in " ".join(c.cmdline())]


def draw_cases(n: int = 20, seed: int = 0) -> list[tuple[str, str, signal.Signals]]:
    """n random (phase, victim, signal), every phase drawn n/5 times."""
    rng = random.Random(seed)
    phases = PHASES * (n // len(PHASES))
    rng.shuffle(phases)
    return [
        (
            phase,
            rng.choice(["parent", "worker"]) if phase in WITH_WORKERS else "parent",
            rng.choice(SIGNALS),
        )
        for phase in phases
    ]


@pytest.mark.parametrize(
    ("case", "phase", "victim", "signum"),
    [(i, *c) for i, c in enumerate(draw_cases())],
    ids=[f"{i}-{p}-{v}-{s.name}" for i, (p, v, s) in enumerate(draw_cases())],
)
def test_a_random_kill_then_a_rerun_completes_with_the_artefacts_of_an_undisturbed_run(
    corpus, reference, tmp_path, case, phase, victim, signum
):
    rng = random.Random(case)  # which worker
    ref_root, ref_hashes = reference
    cache, run = tmp_path / "cache", tmp_path / "run"
    if phase in ("training", "checkpoint write"):  # the data phases are not under test: reuse
        shutil.copytree(ref_root / "cache", cache)
    marker, log, hashes = tmp_path / "marker", tmp_path / "first.log", tmp_path / "first.txt"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(DRIVER), phase, str(marker)] + args(corpus, cache, run),
            cwd=tmp_path,
            env=subprocess_env(**{ENV: str(hashes)}),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + RUN_BOUND_S
        while not marker.exists():
            assert proc.poll() is None, f"ended before {phase}: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{phase} never reached"
            time.sleep(0.02)
        time.sleep(0.2)
        seen = tree(proc.pid)
        target = proc.pid
        if victim == "worker":
            workers = workers_of(proc.pid)
            assert workers, f"no worker in {phase}"
            target = rng.choice(workers)
        os.kill(target, signum)
        signalled = time.monotonic()
        while proc.poll() is None:
            seen |= tree(proc.pid)
            assert time.monotonic() - signalled < END_BOUND_S, f"hang after {signum!r}"
            time.sleep(0.1)
        ended_s = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    first = log.read_text()
    assert still_running(seen) == [], "processes of the first run survive"
    if victim == "worker" and proc.returncode != 0:  # a dead worker: one error naming it
        name = signal.Signals(signum).name
        assert f"worker process {target} was killed by {name}" in first, first[-3000:]

    last = run / "checkpoints" / "last.ckpt"
    resumed_from = checkpoint_step(last) if last.exists() else None
    rerun_hashes = tmp_path / "rerun.txt"
    start = time.monotonic()
    if resumed_from == STEPS:  # the first run finished (the signal was ignored or came late)
        rerun = None
    else:
        extra = [f"ckpt_path={last}"] if resumed_from is not None else []
        rerun = run_train(args(corpus, cache, run, *extra), tmp_path, rerun_hashes)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    rerun_s = time.monotonic() - start
    assert rerun_s < RUN_BOUND_S
    assert hidden_debris(cache) == []
    assert artefacts(cache) == artefacts(ref_root / "cache")
    assert checkpoint_step(last) == STEPS
    assert_same_weights(last, ref_root / "run" / "checkpoints" / "last.ckpt")
    for hashes_file in (hashes, rerun_hashes):
        steps = by_step(hashes_file)
        assert steps == {s: ref_hashes[s] for s in steps}

    outcome = {
        "case": case,
        "phase": phase,
        "victim": victim,
        "signal": signal.Signals(signum).name,
        "first_exit": proc.returncode,
        "first_ended_s": round(ended_s, 2),
        "first_error": next(  # (after a progress bar's carriage return, on the same line)
            (line.split("error: ", 1)[1] for line in first.splitlines() if "error: " in line),
            None,
        ),
        "resumed_from_step": resumed_from,
        "rerun_s": round(rerun_s, 1),
        "rerun_needed": rerun is not None,
    }
    report = os.environ.get("PACKLM_FAULT_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(json.dumps(outcome) + "\n")
