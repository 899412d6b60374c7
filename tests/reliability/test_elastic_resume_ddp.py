"""Elastic resume through `python train.py` (issue #37): a checkpoint of 2 DDP ranks (gloo,
CPU) x batch 16, resumed mid-epoch by one process x batch 32, trains the same global batches as
an uninterrupted one-process run, across the epoch's end, to the same losses and weights; and
2 -> 3, 3 -> 1, 1 -> 2 ranks (workers 0 -> 2), mid-epoch and at an epoch's end, train each
sample of the epoch once.

The sample-level property for other rank, batch and worker changes is
tests/data/epoch/test_elastic_resume.py (in-process, one loader per rank)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.runs import assert_same_weights, checkpoint_step, reliability_overrides, run_train
from packlm.callbacks.batch_hashes import ENV, read_batch_hashes

pytestmark = pytest.mark.slow

DDP = ["trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]
# a resume keeps the run's own settings (train/resume_config.py): one process is asked for
ONE = ["trainer.strategy=auto", "trainer.devices=1"]
STOP, STEPS = 3, 10  # the tiny corpus's epoch has 224 samples: 7 batches of 32


def args(corpus, cache, run: Path, steps: int, *extra: str) -> list[str]:
    """float32: 2 ranks x 16 equal 1 x 32 to 1e-6 (see test_ddp.py)."""
    return reliability_overrides(
        corpus, cache, f"trainer.max_steps={steps}", "trainer.precision=32-true",
        f"hydra.run.dir={run}", *extra,
    )  # fmt: skip


def losses(run: Path) -> dict[int, float]:
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars("train/loss")}


def global_batches(path: Path) -> dict[int, list[str]]:
    """step -> the row hashes of its global batch (rank r's rows at positions r, r+w, ...)."""
    shares: dict[int, dict[int, list[str]]] = {}
    for step, _, rank, _, rows in read_batch_hashes(path):
        shares.setdefault(step, {})[rank] = rows
    return {
        step: [row for slot in zip(*(by[r] for r in sorted(by)), strict=True) for row in slot]
        for step, by in shares.items()
    }


def epoch_starts(path: Path) -> list[int]:
    """The steps whose batch_idx is 0 (rank 0): where Lightning began an epoch."""
    return [s for s, idx, rank, _, _ in read_batch_hashes(path) if rank == 0 and idx == 0]


@pytest.fixture(scope="module")
def two_ranks(tiny_corpus, cache_dir, tmp_path_factory):
    """STOP steps of 2 DDP ranks x batch 16: its run directory and batch hashes."""
    tmp = tmp_path_factory.mktemp("two")
    run, hashes = tmp / "first", tmp / "elastic.txt"
    done = run_train(
        args(tiny_corpus, cache_dir, run, STOP, "data.batch_size=16", *DDP),
        tmp, **{ENV: str(hashes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    return run, hashes


def resumed(two_ranks, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the two-rank run (a resume writes on into the checkpoint's run directory)."""
    first, hashes = tmp_path / "first", tmp_path / "elastic.txt"
    shutil.copytree(two_ranks[0], first)
    shutil.copy(two_ranks[1], hashes)
    return first, hashes


def test_two_ranks_resumed_by_one_with_the_same_global_batch_train_like_one_run(
    tiny_corpus, cache_dir, tmp_path, two_ranks
):
    ref, ref_hashes = tmp_path / "ref", tmp_path / "ref.txt"
    done = run_train(
        args(tiny_corpus, cache_dir, ref, STEPS, "data.batch_size=32"),
        tmp_path, **{ENV: str(ref_hashes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    (first, hashes), second = resumed(two_ranks, tmp_path), tmp_path / "second"
    ckpt = first / "checkpoints" / "last.ckpt"
    assert checkpoint_step(ckpt) == STOP
    done = run_train(
        args(tiny_corpus, cache_dir, second, STEPS, "data.batch_size=32", *ONE,
             f"ckpt_path={ckpt}"),
        tmp_path, **{ENV: str(hashes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    logged = done.stdout + done.stderr + (second / "job.log").read_text()
    assert (
        "resume: 2 rank(s) x batch 16 -> 1 rank(s) x batch 32: epoch 0 continues at sample 96"
        in (logged)
    )

    # the same global batch at every step: the first 3 from 2 ranks, the rest from one
    # process, through the end of the epoch (where Lightning's per-rank count must end it)
    expected, got = global_batches(ref_hashes), global_batches(hashes)
    assert sorted(got) == sorted(expected) == list(range(STEPS))
    assert got == expected
    starts = epoch_starts(ref_hashes)
    assert len(starts) >= 2 and starts[1] > STOP, starts  # the resume is mid-epoch 0
    assert epoch_starts(hashes) == starts

    # a resume writes on into the checkpoint's run directory
    ref_losses, got_losses = losses(ref), losses(first)
    assert sorted(got_losses) == sorted(ref_losses)
    torch.testing.assert_close(
        torch.tensor([got_losses[s] for s in sorted(ref_losses)]),
        torch.tensor([ref_losses[s] for s in sorted(ref_losses)]),
        rtol=1e-5, atol=1e-6,
    )  # fmt: skip
    assert_same_weights(
        first / "checkpoints" / "last.ckpt", ref / "checkpoints" / "last.ckpt", atol=1e-5
    )


def test_two_ranks_resumed_by_one_of_half_the_global_batch_end_the_epoch_after_its_samples(
    tiny_corpus, cache_dir, tmp_path, two_ranks
):
    """2 x 16 -> 1 x 16: Lightning restores 3 finished batches per rank (48 samples each
    under the old world) and the epoch's length is 3 + the 8 batches of 16 that remain, so
    epoch 0 ends at step 11 having trained each of its 224 samples exactly once."""
    ref, ref_hashes = tmp_path / "ref", tmp_path / "ref.txt"
    done = run_train(
        args(tiny_corpus, cache_dir, ref, 7, "data.batch_size=32"), tmp_path,
        **{ENV: str(ref_hashes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (first, hashes), second = resumed(two_ranks, tmp_path), tmp_path / "second"
    ckpt = first / "checkpoints" / "last.ckpt"
    done = run_train(
        args(tiny_corpus, cache_dir, second, 13, "data.batch_size=16", *ONE, f"ckpt_path={ckpt}"),
        tmp_path, **{ENV: str(hashes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert epoch_starts(hashes) == [0, 11] and epoch_starts(ref_hashes) == [0]
    got = global_batches(hashes)
    epoch0 = Counter(row for step in range(11) for row in got[step])
    assert epoch0 == Counter(row for rows in global_batches(ref_hashes).values() for row in rows)
    assert sum(epoch0.values()) == 224 and set(epoch0.values()) == {1}


def rows_from(path: Path, first: int = 0, end: float = float("inf")) -> Counter:
    """The row hashes trained at global steps first <= step < end."""
    return Counter(row for step, rows in global_batches(path).items() if first <= step < end
                   for row in rows)  # fmt: skip


@pytest.fixture(scope="module")
def reference_epochs(tiny_corpus, cache_dir, tmp_path_factory):
    """Two epochs of one process x batch 32 (224 samples an epoch, no padding row)."""
    tmp = tmp_path_factory.mktemp("ref")
    hashes = tmp / "ref.txt"
    done = run_train(
        args(tiny_corpus, cache_dir, tmp / "run", 100, "data.batch_size=32", "trainer.max_epochs=2"),
        tmp, **{ENV: str(hashes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert epoch_starts(hashes) == [0, 7]  # 224 samples = 7 batches of 32 an epoch
    return [rows_from(hashes, 0, 7), rows_from(hashes, 7)]


def world(ranks: int, batch: int, workers: int) -> list[str]:
    ddp = ["trainer.strategy=ddp", f"trainer.devices={ranks}", "trainer.accelerator=cpu"]
    return [f"data.batch_size={batch}", f"data.num_workers={workers}", *(ddp if ranks > 1 else ONE)]


# (ranks, per-rank batch, workers) before -> after, and where the first run stops
MATRIX = [
    ((2, 16, 0), (3, 8, 0), "mid-epoch"),
    ((3, 8, 0), (1, 32, 0), "mid-epoch"),
    ((1, 32, 0), (2, 16, 2), "mid-epoch"),
    ((2, 16, 0), (3, 8, 2), "epoch-end"),
]


@pytest.mark.parametrize(
    ("before", "after", "where"),
    MATRIX,
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v,
)
def test_a_ddp_resume_on_another_world_trains_each_sample_of_the_epoch_once(
    tiny_corpus, cache_dir, tmp_path, reference_epochs, before, after, where
):
    """2 -> 3, 3 -> 1 and 1 -> 2 ranks (workers 0 -> 2), mid-epoch and at the epoch's end:
    the epoch the resume lands in trains the uninterrupted run's samples, each once (a world
    of 3 ends the 224-sample epoch on a short global batch: its padding rows are not samples)."""
    first, second, hashes = tmp_path / "first", tmp_path / "second", tmp_path / "hashes.txt"
    global_before = before[0] * before[1]
    stop = 3 if where == "mid-epoch" else -(-224 // global_before)  # all of epoch 0
    done = run_train(
        args(tiny_corpus, cache_dir, first, stop, *world(*before)), tmp_path, **{ENV: str(hashes)}
    )
    assert done.returncode == 0, done.stderr[-5000:]
    epoch = 0 if where == "mid-epoch" else 1
    ckpt = first / "checkpoints" / "last.ckpt"
    done = run_train(
        args(tiny_corpus, cache_dir, second, 100, *world(*after), f"ckpt_path={ckpt}",
             f"trainer.max_epochs={epoch + 1}"),
        tmp_path, **{ENV: str(hashes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    # mid-epoch: both runs' rows are epoch 0's; at the end: the resumed run's are epoch 1's
    got, expected = rows_from(hashes, 0 if epoch == 0 else stop), reference_epochs[epoch]
    assert {h: got[h] for h in expected} == expected  # every sample of the epoch, once
    padding = set(got) - set(expected)  # a short last global batch's empty rows: one hash
    assert len(padding) <= 1, padding
    if where == "epoch-end":  # Lightning's batch_idx restarts at 0 in the epoch after it
        assert epoch_starts(hashes) == [0, stop], epoch_starts(hashes)
