"""Kill and resume: SIGKILL at random steps, SIGTERM and Ctrl-C stop cleanly with a checkpoint;
resuming gives the batches and the final weights of an uninterrupted run.

In-process tests (default suite) send the signal to the test process itself from a
callback; the slow ones run `python train.py` in a subprocess and kill it from outside.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import lightning as L
import pytest
import torch

from helpers.runs import (
    assert_same_weights,
    checkpoint_step,
    reliability_overrides,
    run_train,
    subprocess_env,
    train_command,
)
from packlm.callbacks import AtomicCheckpointIO, BatchHashes, TrainingStopped
from packlm.callbacks.batch_hashes import ENV, read_batch_hashes
from packlm.train import train

MAX_STEPS = 8


class SignalAt(L.Callback):
    """Send `signum` to this very process when the batch of `step` starts."""

    def __init__(self, step: int, signum: int):
        self.step, self.signum = step, signum

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            assert signal.getsignal(self.signum) not in (signal.SIG_DFL, signal.default_int_handler)
            os.kill(os.getpid(), self.signum)


def by_step(path: Path) -> dict[int, str]:
    """global step -> batch hash (the last line of a step wins: a resumed run repeats none)."""
    return {step: whole for step, _, _, whole, _ in read_batch_hashes(path)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_corpus, cache_dir):
    """An uninterrupted in-process run: its run dir and batch fingerprints."""
    from hydra import compose, initialize_config_dir

    from packlm.config.schema import CONFIG_DIR

    run = tmp_path_factory.mktemp("reference")
    prints = run / "batches.txt"
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=reliability_overrides(tiny_corpus, cache_dir))
    train(cfg, run_dir=run, callbacks=[BatchHashes(prints)])
    return run, by_step(prints)


@pytest.mark.parametrize(("signum", "step"), [(signal.SIGTERM, 2), (signal.SIGINT, 5)])
def test_a_signal_stops_after_the_step_with_a_checkpoint_and_resume_is_exact(
    compose_tiny, reference, tmp_path, signum, step
):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed from the main thread")
    ref_run, ref_batches = reference
    run = tmp_path / "run"
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingStopped) as stopped:
        train(compose_tiny(), run_dir=run, callbacks=[SignalAt(step, signum)])
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    last = run / "checkpoints" / "last.ckpt"
    assert stopped.value.signum == signum and stopped.value.checkpoint == last
    assert stopped.value.step == step + 1 == checkpoint_step(last)  # the step in flight finished
    assert stopped.value.exit_code == 128 + signum
    assert str(stopped.value).endswith(f"\n  python train.py ckpt_path={last.resolve()}")

    prints = tmp_path / "resumed.txt"
    train(compose_tiny(f"ckpt_path={last}"), callbacks=[BatchHashes(prints)])
    resumed = by_step(prints)
    assert sorted(resumed) == list(range(step + 1, MAX_STEPS))
    assert resumed == {s: ref_batches[s] for s in resumed}
    assert_same_weights(last, ref_run / "checkpoints" / "last.ckpt")
    assert checkpoint_step(last) == MAX_STEPS


class DoubleCtrlC(L.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # stop after this step...
            os.kill(os.getpid(), signal.SIGINT)  # ...no: now


def test_a_second_ctrl_c_aborts_at_once_without_a_checkpoint(compose_tiny, tmp_path):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed from the main thread")
    with pytest.raises(SystemExit) as e:  # Lightning's KeyboardInterrupt path: exit status 1
        train(
            compose_tiny("train.checkpoint_every_n_steps=100"),
            run_dir=tmp_path,
            callbacks=[DoubleCtrlC()],
        )
    assert e.value.code == 1
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_checkpoints_every_n_steps_and_at_the_end(compose_tiny, tmp_path):
    saved = []

    class Spy(L.Callback):
        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            saved.append(trainer.global_step)

    train(
        compose_tiny("train.checkpoint_every_n_steps=3", "trainer.max_steps=7"),
        run_dir=tmp_path,
        callbacks=[Spy()],
    )
    # last.ckpt at 3, 6 and the end (7); the val/loss-best checkpoint after validations (4)
    assert sorted(set(saved)) == [3, 4, 6, 7]
    assert checkpoint_step(tmp_path / "checkpoints" / "last.ckpt") == 7
    assert not list((tmp_path / "checkpoints").glob(".*tmp*"))


def test_a_failed_checkpoint_write_keeps_the_previous_file(tmp_path, monkeypatch):
    """Disk full (ENOSPC) while writing: the old last.ckpt is intact, no temporary is left."""
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(
        OSError, match=r"cannot write checkpoint .*last\.ckpt: No space left on device \(disk full"
    ):
        io.save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"step": 1}
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]


def test_a_temporary_left_by_a_killed_writer_is_removed(tmp_path):
    path = tmp_path / "last.ckpt"
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f".last.ckpt.tmp-{dead.pid}").write_bytes(b"partial")
    AtomicCheckpointIO().save_checkpoint({"step": 3}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


# --- subprocesses: python train.py killed from outside -----------------------------------------

SUB_STEPS = 12


def sub_args(corpus, cache, run: Path, *extra: str) -> list[str]:
    return reliability_overrides(
        corpus, cache, f"trainer.max_steps={SUB_STEPS}", f"hydra.run.dir={run}", *extra
    )


@pytest.fixture(scope="module")
def sub_reference(tmp_path_factory, tiny_corpus, cache_dir):
    run = tmp_path_factory.mktemp("sub_reference") / "run"
    prints = run.parent / "batches.txt"
    result = run_train(sub_args(tiny_corpus, cache_dir, run), run.parent, **{ENV: str(prints)})
    assert result.returncode == 0, result.stderr[-3000:]
    return run, by_step(prints)


def wait_for_step(proc: subprocess.Popen, prints: Path, step: int, timeout: float = 120) -> None:
    """Block until the batch of global step `step` has started (its fingerprint is written)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if prints.exists() and any(s >= step for s in by_step(prints)):
            return
        if proc.poll() is not None:
            raise AssertionError(f"train.py ended (code {proc.returncode}) before step {step}")
        time.sleep(0.005)
    raise AssertionError(f"no step {step} after {timeout} s")


def resume_and_compare(tiny_corpus, cache_dir, run: Path, reference, tmp_path) -> int:
    """Resume from run's last.ckpt; assert batches and final weights equal the reference's."""
    ref_run, ref_batches = reference
    last = run / "checkpoints" / "last.ckpt"
    start = checkpoint_step(last)
    prints = tmp_path / "resumed.txt"
    result = run_train(
        sub_args(tiny_corpus, cache_dir, run, f"ckpt_path={last}"),
        tmp_path,
        **{ENV: str(prints)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = by_step(prints)
    assert sorted(resumed) == list(range(start, SUB_STEPS))
    assert resumed == {s: ref_batches[s] for s in resumed}
    assert_same_weights(last, ref_run / "checkpoints" / "last.ckpt")
    return start


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sigkill_at_a_random_step_then_resume_equals_an_uninterrupted_run(
    tiny_corpus, cache_dir, sub_reference, tmp_path, seed
):
    rng = random.Random(seed)
    kill_step = rng.randint(1, SUB_STEPS - 2)
    run, prints = tmp_path / "run", tmp_path / "killed.txt"
    proc = subprocess.Popen(
        train_command(*sub_args(tiny_corpus, cache_dir, run)),
        cwd=tmp_path,
        env=subprocess_env(**{ENV: str(prints)}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_step(proc, prints, kill_step)
        time.sleep(rng.uniform(0, 0.05))  # anywhere inside the step, its checkpoint write too
        proc.kill()
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    last_started = max(by_step(prints))  # the run may pass kill_step before the kill lands
    start = resume_and_compare(tiny_corpus, cache_dir, run, sub_reference, tmp_path)
    assert 1 <= start <= last_started + 1


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_train_py_stops_cleanly_on_sigterm_and_ctrl_c(
    tiny_corpus, cache_dir, sub_reference, tmp_path, signum
):
    run, prints = tmp_path / "run", tmp_path / "stopped.txt"
    proc = subprocess.Popen(
        train_command(*sub_args(tiny_corpus, cache_dir, run, "train.checkpoint_every_n_steps=100")),
        cwd=tmp_path,
        env=subprocess_env(**{ENV: str(prints)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for_step(proc, prints, 4)
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, output[-3000:]
    name = signal.Signals(signum).name
    assert f"stopped by {name} after step" in output
    # the whole command that resumes it, the checkpoint's path absolute
    last = (run / "checkpoints" / "last.ckpt").resolve()
    assert f"  python train.py ckpt_path={last}\n" in output
    assert f"stopped by {name}" in (run / "job.log").read_text()
    stop_step = checkpoint_step(run / "checkpoints" / "last.ckpt")
    assert stop_step >= 5  # no periodic checkpoint before: this one was written on the signal
    assert resume_and_compare(tiny_corpus, cache_dir, run, sub_reference, tmp_path) == stop_step


def test_ctrl_c_in_a_terminal_is_reported_once_with_dataloader_workers(
    tiny_corpus, cache_dir, tmp_path
):
    """A terminal's Ctrl-C reaches the whole process group: the DataLoader workers ignore it
    (they inherited the training process's handler, and each printed the notice), the
    training process stops after its step with a checkpoint, exit 130."""
    run, prints = tmp_path / "run", tmp_path / "batches.txt"
    args = sub_args(tiny_corpus, cache_dir, run, "data.num_workers=2", "trainer.max_steps=1000")
    proc = subprocess.Popen(
        train_command(*args),
        cwd=tmp_path,
        env=subprocess_env(**{ENV: str(prints)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        wait_for_step(proc, prints, 2)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGINT, output[-3000:]
    assert output.count("received SIGINT") == 1, output[-3000:]
    assert "Detected KeyboardInterrupt" not in output  # no second Ctrl-C was taken
    assert checkpoint_step(run / "checkpoints" / "last.ckpt") >= 3
