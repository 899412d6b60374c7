"""DDP on the CPU (gloo) through `python train.py`: two ranks of batch B see disjoint, complete
shares of the global batch and train exactly like one process with batch 2B; Hydra and
Lightning's subprocess relaunch create exactly one run directory (one per job in a sweep).

The module-level equivalence (gradients of 2 ranks with accumulation = one process) is
tests/model/test_lit_module.py::test_two_ddp_ranks_equal_one_process (ddp_spawn).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.runs import (
    assert_same_weights,
    checkpoint_step,
    reliability_overrides,
    run_train,
    subprocess_env,
    train_command,
)
from packlm.callbacks.batch_hashes import ENV, read_batch_hashes

pytestmark = pytest.mark.slow

DDP = ["trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]
STEPS = 6


def args(corpus, cache, *extra: str) -> list[str]:
    """float32: the loss of two ranks equals one process's to 1e-6, a float32 property (in
    bf16-mixed, which trainer.precision=auto picks on some CPUs, matmuls of half the batch
    round differently)."""
    return reliability_overrides(
        corpus, cache, f"trainer.max_steps={STEPS}", "trainer.precision=32-true", *extra
    )


def losses(run: Path) -> list[float]:
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.value for e in sorted(acc.Scalars("train/loss"), key=lambda e: e.step)]


def rows_by_rank(path: Path) -> dict[tuple[int, int], list[str]]:
    """(step, rank) -> row hashes of that rank's batch."""
    return {(step, rank): rows for step, _, rank, _, rows in read_batch_hashes(path)}


def all_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, tiny_corpus, cache_dir):
    """The reference: one process, batch 2B = 8."""
    tmp = tmp_path_factory.mktemp("one")
    run, prints = tmp / "run", tmp / "batches.txt"
    result = run_train(
        args(tiny_corpus, cache_dir, "data.batch_size=8", f"hydra.run.dir={run}"),
        tmp,
        **{ENV: str(prints)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run, prints


def test_two_ranks_share_the_global_batch_and_train_like_one_process(
    one_process, tiny_corpus, cache_dir, tmp_path
):
    prints = tmp_path / "batches.txt"
    before = all_files(tmp_path)
    result = run_train(args(tiny_corpus, cache_dir, *DDP), tmp_path, **{ENV: str(prints)})
    assert result.returncode == 0, result.stderr[-5000:]

    # exactly one run directory, written by rank 0; rank 1 adds only its log file to it
    runs = sorted(p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir())
    assert len(runs) == 1, runs
    (run,) = runs
    created = all_files(tmp_path) - before - {prints.name}
    outside = [f for f in created if not f.startswith(str(run.relative_to(tmp_path)))]
    assert outside == [], outside
    assert (run / "train_ddp_process_1.log").is_file() and (run / ".hydra").is_dir()
    assert not list(run.rglob("outputs")) and not (tmp_path / "multirun").exists()

    # disjoint and complete: per step, rank 0 has positions 0,2,4,6 and rank 1 has 1,3,5,7
    # of the one-process batch of 8
    ddp, ref = rows_by_rank(prints), rows_by_rank(one_process[1])
    assert sorted(ddp) == [(s, r) for s in range(STEPS) for r in (0, 1)]
    for step in range(STEPS):
        r0, r1, whole = ddp[step, 0], ddp[step, 1], ref[step, 0]
        assert len(r0) == len(r1) == 4 and r0 == whole[0::2] and r1 == whole[1::2]
    seen = Counter(h for rows in ddp.values() for h in rows)
    assert seen == Counter(h for rows in ref.values() for h in rows)

    # the same loss at every step and the same final weights
    ref_losses, ddp_losses = losses(one_process[0]), losses(run)
    assert len(ddp_losses) == STEPS
    torch.testing.assert_close(
        torch.tensor(ddp_losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6
    )
    assert_same_weights(
        run / "checkpoints" / "last.ckpt", one_process[0] / "checkpoints" / "last.ckpt", atol=1e-5
    )


def test_a_sweep_with_ddp_creates_one_directory_per_job(tiny_corpus, cache_dir, tmp_path):
    sweep, prints = tmp_path / "sweep", tmp_path / "batches.txt"
    result = run_train(
        ["-m", "data.stride=8,16", f"hydra.sweep.dir={sweep}",
         *[a for a in args(tiny_corpus, cache_dir, *DDP, "trainer.max_steps=2")
           if not a.startswith("data.stride=")]],
        tmp_path,
        **{ENV: str(prints)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-5000:]
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["0_data.stride=8", "1_data.stride=16"]
    for job in jobs:
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file()
        assert (sweep / job / "train_ddp_process_1.log").is_file()
        assert len(losses(sweep / job)) == 2
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()
    ranks = Counter(rank for _, _, rank, _, _ in read_batch_hashes(prints))
    assert ranks == {0: 4, 1: 4}  # 2 jobs x 2 steps on each rank


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM-to-rank-0", "Ctrl-C-to-all-ranks"]
)
def test_a_signal_stops_every_rank_at_the_same_step_with_one_checkpoint(
    tiny_corpus, cache_dir, tmp_path, signum
):
    run, prints = tmp_path / "run", tmp_path / "batches.txt"
    proc = subprocess.Popen(
        train_command(
            *args(tiny_corpus, cache_dir, *DDP, "trainer.max_steps=40",
                  "train.checkpoint_every_n_steps=100", f"hydra.run.dir={run}")
        ),
        cwd=tmp_path,
        env=subprocess_env(**{ENV: str(prints)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, like a job in a terminal
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (prints.exists() and any(s >= 3 for s, *_ in read_batch_hashes(prints))):
        assert proc.poll() is None and time.monotonic() < deadline, "no step 3"
        time.sleep(0.01)
    if signum == signal.SIGTERM:
        proc.send_signal(signum)  # to rank 0 only, as a scheduler would; it forwards
    else:
        os.killpg(proc.pid, signum)  # Ctrl-C in a terminal reaches every process of the job
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, output[-5000:]
    step = checkpoint_step(run / "checkpoints" / "last.ckpt")
    assert 4 <= step < 40
    last_steps = {
        rank: max(s for s, _, r, _, _ in read_batch_hashes(prints) if r == rank) for rank in (0, 1)
    }
    assert last_steps == {0: step - 1, 1: step - 1}  # both ranks trained exactly up to the stop
    assert f"stopped by {signal.Signals(signum).name} after step" in output
