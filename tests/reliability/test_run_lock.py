"""One run folder, one run: a second run (two resumes of one checkpoint) is refused at once
naming the holder; a lock kept for a dead owner is broken; DDP ranks > 0 take no lock."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import packlm.train.job as job
from packlm.train.run_lock import LOCK_NAME, RunLocked, run_lock

HOLD = textwrap.dedent(
    """
    import fcntl, json, sys, time
    f = open(sys.argv[1], "a+")
    fcntl.flock(f, fcntl.LOCK_EX)
    f.truncate(0); f.write(json.dumps({"pid": int(sys.argv[2]), "host": sys.argv[3]}))
    f.flush(); print("held", flush=True); time.sleep(60)
    """
)


def hold(path, pid: str, host: str) -> subprocess.Popen:
    """A process that keeps the flock of `path` with the owner record (pid, host): where the
    pid is dead, a process that inherited the lock from its dead owner."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), pid, host], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.fixture
def no_fit(monkeypatch):
    """train() up to the run itself: the lock is taken (or refused) before any work."""
    calls = []
    monkeypatch.setattr(job, "_fit", lambda *a: calls.append(a) or {})
    return calls


def test_a_second_run_in_a_locked_folder_is_refused_at_once_naming_the_holder(
    compose_tiny, tmp_path, no_fit
):
    run = tmp_path / "run"
    run.mkdir()
    with run_lock(run):  # the first run, in this process
        owner = json.loads((run / LOCK_NAME).read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        start = time.monotonic()
        with pytest.raises(
            RunLocked,
            match=rf"{run} is in use by another run \(process {os.getpid()} on "
            rf"{socket.gethostname()}, started {owner['started']}\)",
        ):
            job.train(compose_tiny(), run_dir=run)
        assert time.monotonic() - start < 5 and not no_fit  # refused before any work
    job.train(compose_tiny(), run_dir=run)  # released at the end of the first run
    assert len(no_fit) == 1
    assert (run / LOCK_NAME).read_text() == ""  # the owner record goes with the lock


def test_a_lock_held_by_another_live_process_is_refused(tmp_path):
    with run_lock(tmp_path):
        pass
    holder = hold(tmp_path / LOCK_NAME, str(os.getpid()), socket.gethostname())
    try:
        with pytest.raises(RunLocked, match=rf"process {os.getpid()} on "), run_lock(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()
    with run_lock(tmp_path):  # the kernel dropped the killed holder's lock
        pass


def test_a_lock_kept_for_a_dead_owner_is_broken_with_a_log_line(tmp_path, caplog):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    holder = hold(tmp_path / LOCK_NAME, dead.stdout.strip(), socket.gethostname())
    try:
        with caplog.at_level(logging.WARNING, logger="packlm.train.run_lock"), run_lock(tmp_path):
            owner = json.loads((tmp_path / LOCK_NAME).read_text())
            assert owner["pid"] == os.getpid()
        assert f"its owner, process {dead.stdout.strip()}, is dead" in caplog.text
    finally:
        holder.kill()
        holder.wait()


def test_ddp_ranks_above_zero_take_no_lock(compose_tiny, tmp_path, no_fit, monkeypatch):
    monkeypatch.setattr(job.rank_zero_only, "rank", 1)
    run = tmp_path / "run"
    run.mkdir()
    with run_lock(run):  # held by rank 0
        job.train(compose_tiny(), run_dir=run)
    assert len(no_fit) == 1


@pytest.mark.slow
def test_a_fresh_run_in_a_live_runs_folder_touches_nothing_and_the_live_run_resumes(
    tiny_corpus, cache_dir, tmp_path
):
    """Two real processes: a second `train.py` with the live run's hydra.run.dir (and another
    model) is refused before Hydra writes there, so the live run's .hydra/ stays byte-identical
    and it resumes afterwards (it used to get the second run's config: `the model differs`)."""
    from helpers.runs import (
        checkpoint_step,
        run_train,
        subprocess_env,
        tiny_overrides,
        train_command,
    )

    run = tmp_path / "run"
    args = tiny_overrides(tiny_corpus, cache_dir, steps=100_000, checkpoint_every=1, lean=True)
    with open(tmp_path / "live.log", "w") as log:
        live = subprocess.Popen(train_command(*args, f"hydra.run.dir={run}"), cwd=tmp_path,
                                env=subprocess_env(), stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        last = run / "checkpoints" / "last.ckpt"
        deadline = time.monotonic() + 300
        while not last.exists():
            assert live.poll() is None, (tmp_path / "live.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the live run wrote no checkpoint"
            time.sleep(0.2)
        hydra_before = {p: p.read_bytes() for p in (run / ".hydra").iterdir()}

        second = run_train([*args, "model.n_embd=64", f"hydra.run.dir={run}"], cwd=tmp_path)
        assert second.returncode == 1, second.stderr[-3000:]
        errors = [x for x in second.stderr.splitlines() if x.startswith("error:")]
        assert (
            len(errors) == 1 and f"{run} is in use by another run (process {live.pid}" in errors[0]
        )
        assert "Traceback" not in second.stderr
        assert {p: p.read_bytes() for p in (run / ".hydra").iterdir()} == hydra_before
    finally:
        live.send_signal(signal.SIGTERM)  # a clean stop: last.ckpt written after the step
        live.wait(timeout=120)
    step = checkpoint_step(run / "checkpoints" / "last.ckpt")
    resumed = run_train([f"ckpt_path={run}/checkpoints/last.ckpt", f"trainer.max_steps={step + 2}"],
                        cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert checkpoint_step(run / "checkpoints" / "last.ckpt") == step + 2


def test_the_hydra_callback_refuses_a_held_folder_before_hydra_writes(tmp_path, capsys):
    """The check `WritableRunDir.on_run_start` makes before Hydra's run_job writes .hydra/
    (the two-process test above is its slow twin): a held folder exits 1 with one line,
    nothing created; a free one, a DDP rank > 0 and a tool without .hydra/ pass."""
    from omegaconf import OmegaConf

    from packlm.runtime.run_folder import WritableRunDir

    run = tmp_path / "run"
    run.mkdir()

    def config(output_subdir=".hydra"):
        return OmegaConf.create(
            {"hydra": {"run": {"dir": str(run)}, "output_subdir": output_subdir}}
        )

    with run_lock(run):
        before = sorted(run.iterdir())
        with pytest.raises(SystemExit) as e:
            WritableRunDir().on_run_start(config())
        assert e.value.code == 1
        assert capsys.readouterr().err.startswith(f"error: {run} is in use by another run (process")
        assert sorted(run.iterdir()) == before  # no .hydra/, no probe file
        WritableRunDir().on_run_start(config(output_subdir=None))  # DDP ranks > 0, the tools
    WritableRunDir().on_run_start(config())  # released
