"""The tiny run: its overrides, train.py in a subprocess, and checkpoint readers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TRAIN_PY = ROOT / "train.py"


def tiny_overrides(
    corpus: Path,
    cache: Path,
    *extra: str,
    steps: int = 6,
    val_every: int = 3,
    checkpoint_every: int | None = None,
    lean: bool = False,
    num_workers: int | None = 0,
) -> list[str]:
    """A run of a few seconds on the tiny corpus: tiny model, tiny windows.

    `num_workers`: DataLoader workers (0: none to start, the fast default of the tests;
    None: the user's default, for tests of how workers start).

    `lean` turns off what costs time without being under test (text samples, batch images,
    the final validation): the reliability tests kill and time runs.
    """
    overrides = [
        f"data.sources=[{corpus}/*.txt]",
        "data.val_fraction=0.2",
        "data.window=32",
        "data.stride=16",
        "data.batch_size=4",
        "tokenizer.vocab_size=300",
        "model.context_length=32",
        "model.n_layer=1",
        "model.n_head=2",
        "model.n_embd=32",
        "optim.warmup_steps=2",
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={val_every}",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "train.sample_tokens=8",
        f"cache_dir={cache}",
    ]
    if lean:
        overrides += [
            "train.sample_prompt=",
            "train.log_batch_images=false",
            "train.validate_at_end=false",
        ]
    if num_workers is not None:
        overrides.append(f"data.num_workers={num_workers}")
    if checkpoint_every is not None:
        overrides.append(f"train.checkpoint_every_n_steps={checkpoint_every}")
    return [*overrides, *extra]


def reliability_overrides(corpus: Path, cache: Path, *extra: str) -> list[str]:
    """The reliability tests' run: 8 steps, a checkpoint after every one, nothing optional."""
    return tiny_overrides(
        corpus, cache, *extra, steps=8, val_every=4, checkpoint_every=1, lean=True
    )


def train_command(*args: str) -> list[str]:
    return [sys.executable, str(TRAIN_PY), *args]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env.pop("LOCAL_RANK", None)
    return env


def run_train(args: list[str], cwd: Path, timeout: float = 300, **env: str):
    return subprocess.run(
        train_command(*args),
        cwd=cwd,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


def assert_same_weights(a: Path, b: Path, atol: float = 1e-6) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=atol, rtol=1e-5, msg=k)


def checkpoint_step(ckpt: Path) -> int:
    return int(torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"])
