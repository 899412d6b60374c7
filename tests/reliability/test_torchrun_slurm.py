"""Ranks started outside Lightning: `torchrun --standalone --nnodes 1 --nproc-per-node 2
train.py ...` (TorchElasticEnvironment) and examples/slurm_train.sbatch's srun line, started
by hand as two processes with the environment of a 2-task SLURM step (SLURMEnvironment), on
the CPU (gloo). Each trains one epoch: the two ranks take different samples, the epoch covers
each of its samples once, and the batches and val/loss equal the same run under Lightning's
own launcher (`trainer.strategy=ddp`)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.runs import ROOT, reliability_overrides, run_train, subprocess_env, train_command
from packlm.callbacks.batch_hashes import ENV, read_batch_hashes

pytestmark = pytest.mark.slow

SAMPLES = 224  # the tiny corpus's epoch at window 32, stride 16: 7 global batches of 2 x 16
SBATCH = ROOT / "examples" / "slurm_train.sbatch"


def args(corpus, cache, run: Path) -> list[str]:
    """One epoch of 2 ranks x 16 in float32 (the ranks' losses then agree to 1e-6)."""
    return reliability_overrides(
        corpus, cache, "data.batch_size=16", "trainer.max_steps=-1", "trainer.max_epochs=1",
        "trainer.precision=32-true", "trainer.accelerator=cpu", f"hydra.run.dir={run}",
    )  # fmt: skip


def val_losses(run: Path) -> list[float]:
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.value for e in sorted(acc.Scalars("val/loss"), key=lambda e: e.step)]


def rows(hashes: Path) -> dict[tuple[int, int], list[str]]:
    """(step, rank) -> the row hashes that rank trained at that step."""
    return {(step, rank): r for step, _, rank, _, r in read_batch_hashes(hashes)}


@pytest.fixture(scope="module")
def lightning_launcher(tiny_corpus, cache_dir, tmp_path_factory):
    """The reference: Lightning starts rank 1 itself."""
    tmp = tmp_path_factory.mktemp("ddp")
    run, hashes = tmp / "run", tmp / "hashes.txt"
    done = run_train(
        [*args(tiny_corpus, cache_dir, run), "trainer.strategy=ddp", "trainer.devices=2"],
        tmp, **{ENV: str(hashes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    return run, hashes


def check_like_lightnings_launcher(run: Path, hashes: Path, reference: tuple[Path, Path]):
    got, expected = rows(hashes), rows(reference[1])
    steps = SAMPLES // 32
    assert sorted(got) == [(s, r) for s in range(steps) for r in (0, 1)]
    by_rank = [Counter(h for (_, r), rs in got.items() if r == rank for h in rs) for rank in (0, 1)]
    assert not set(by_rank[0]) & set(by_rank[1])  # the ranks trained different samples
    epoch = by_rank[0] + by_rank[1]
    assert sum(epoch.values()) == SAMPLES and set(epoch.values()) == {1}  # each sample once
    assert got == expected  # the same samples in the same places as Lightning's launcher
    ours, theirs = val_losses(run), val_losses(reference[0])
    assert len(ours) == len(theirs) >= 1
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), rtol=0, atol=1e-5)


def test_torchrun_starts_two_ranks_that_train_like_lightnings_launcher(
    tiny_corpus, cache_dir, tmp_path, lightning_launcher
):
    run, hashes = tmp_path / "run", tmp_path / "hashes.txt"
    command = [
        sys.executable, "-m", "torch.distributed.run",  # = torchrun, with this interpreter
        "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
        str(ROOT / "train.py"), "trainer.devices=2", *args(tiny_corpus, cache_dir, run),
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=tmp_path, env=subprocess_env(**{ENV: str(hashes)}),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    check_like_lightnings_launcher(run, hashes, lightning_launcher)


def srun_line(job_id: str, extra: list[str]) -> list[str]:
    """examples/slurm_train.sbatch's srun line, as srun would start each task of it."""
    (line,) = [s for s in SBATCH.read_text().splitlines() if s.startswith("srun ")]
    line = line.replace("${SLURM_JOB_ID}", job_id).replace('"$@"', "")
    argv = shlex.split(line)[1:]  # each task runs what follows srun
    assert argv[:2] == ["python", "train.py"], argv
    return [*train_command(*argv[2:]), *extra]


def test_the_sbatch_scripts_srun_line_in_a_two_task_slurm_step(
    tiny_corpus, cache_dir, tmp_path, lightning_launcher
):
    run, hashes, job = tmp_path / "run", tmp_path / "hashes.txt", f"{os.getpid() % 10000:04d}"
    step = {
        "SLURM_JOB_ID": job, "SLURM_JOB_NAME": "packlm", "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
        "SLURM_NODELIST": "localhost", "SLURM_STEP_NUM_TASKS": "2", ENV: str(hashes),
    }  # fmt: skip
    command = srun_line(job, args(tiny_corpus, cache_dir, run))
    tasks = [
        subprocess.Popen(
            command,
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=subprocess_env(**step, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank)),
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [task.communicate(timeout=600)[0] for task in tasks]
    assert [t.returncode for t in tasks] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in outputs[1]  # Lightning took the ranks from SLURM
    assert (run / ".hydra").is_dir() and (run / "checkpoints" / "last.ckpt").is_file()
    check_like_lightnings_launcher(run, hashes, lightning_launcher)
