"""Every shell block of README.md and docs/*.md runs: its `python train.py` / `python -m
packlm.<tool>` lines in order, in one folder per block that holds the files the docs name
(helpers/docs_inputs.py), as written, with a small step budget, model and tokenizer appended
where the line leaves them at their defaults (BUDGET). A line marked `[illustration]` is
skipped by that mark alone; a line that needs an uninstalled extra's plugin is skipped naming
it. A placeholder for an earlier run (`outputs/<date>/<time>`, `.../last.ckpt`,
`multirun/<date>/<time>`) is the newest such run of the block's folder, trained first (tiny,
as `python train.py`, on 2 CPU ranks so `rank=1` exists) when the block has none yet.

The composition of every line is tests/test_docs_commands.py (fast)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.compose_commands import PLACEHOLDERS, needed_plugins
from helpers.docs_inputs import write_docs_inputs
from helpers.markdown_commands import Command, all_commands, packlm_overrides
from helpers.runs import ROOT, subprocess_env

pytestmark = pytest.mark.slow

BUDGET = {
    "train": [
        "trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.limit_val_batches=2",
        "data.batch_size=2", "model.n_layer=1", "model.n_head=2", "model.n_embd=32",
        "tokenizer.vocab_size=300", "tokenizer.sample_bytes=200000", "train.sample_tokens=8",
        "trainer.enable_progress_bar=false",
    ],
    "prepare": ["tokenizer.vocab_size=300", "tokenizer.sample_bytes=200000"],
    "stats": ["tokenizer.vocab_size=300", "tokenizer.sample_bytes=200000"],
    "export": ["tokenizer.vocab_size=300", "tokenizer.sample_bytes=200000"],
    "generate": ["max_new_tokens=8"],
}  # fmt: skip
"""Appended to a line of that command unless the line sets the key (or, for the tokenizer
keys, names a tokenizer or a checkpoint whose tokenizer is used)."""

RUN = re.compile(r"outputs/(<date>/<time>|\.\.\.|\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d)")
CHECKPOINT = re.compile(r"(?<![\w/])\.\.\./last\.ckpt")
MULTIRUN = re.compile(r"multirun/<date>/<time>")


def blocks() -> dict[str, list[Command]]:
    found: dict[str, list[Command]] = {}
    for c in all_commands():
        found.setdefault(f"{c.file}#{c.block}", []).append(c)
    return {  # the blocks with a packlm line to run (not only an illustration of one)
        f"{cs[0].file}:{cs[0].line}": cs
        for cs in found.values()
        if any(packlm_overrides(c) and not c.illustration for c in cs)
    }


BLOCKS = blocks()


def budget(tool: str, args: list[str]) -> list[str]:
    given = {a.split("=", 1)[0].lstrip("+~") for a in args if "=" in a}
    own_tokenizer = any(k in given for k in ("tokenizer.path", "ckpt_path", "init_from"))
    return [
        b for b in BUDGET.get(tool, [])
        if b.split("=", 1)[0] not in given
        and not (own_tokenizer and b.startswith("tokenizer."))
    ]  # fmt: skip


def newest(paths: list[Path]) -> Path | None:
    return max(paths, key=lambda p: p.stat().st_mtime, default=None)


def resolve(arg: str, cwd: Path, env: dict[str, str]) -> str:
    """An earlier run for each placeholder of `arg` (trained now if the block has none)."""
    if RUN.search(arg) or CHECKPOINT.search(arg):
        runs = [p.parent.parent for p in cwd.glob("outputs/*/*/checkpoints/last.ckpt")]
        if not runs:
            ddp = ["trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]
            run_line(["train.py", *BUDGET["train"], *ddp], cwd, env, "a run for the placeholders")
            runs = [p.parent.parent for p in cwd.glob("outputs/*/*/checkpoints/last.ckpt")]
        run = str(newest(runs).relative_to(cwd))
        arg = CHECKPOINT.sub(f"{run}/checkpoints/last.ckpt", RUN.sub(run, arg))
    if MULTIRUN.search(arg):
        sweeps = [p for p in cwd.glob("multirun/*/*") if p.is_dir()]
        assert sweeps, f"{arg}: no multirun before it in its block"
        arg = MULTIRUN.sub(str(newest(sweeps).relative_to(cwd)), arg)
    for placeholder, value in PLACEHOLDERS.items():
        arg = arg.replace(placeholder, value)
    return arg


def run_line(argv: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    done = subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, f"{what}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


@pytest.mark.parametrize("name", BLOCKS)
def test_a_documented_block_runs(name, tmp_path, tmp_path_factory):
    cwd = write_docs_inputs(tmp_path / "work")
    cache = tmp_path_factory.getbasetemp() / "docs-cache"  # shared by the blocks
    env = subprocess_env(PACKLM_CACHE=str(cache), PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))  # fmt: skip
    (cwd / "train.py").symlink_to(ROOT / "train.py")
    ran = []
    for command in BLOCKS[name]:
        found = packlm_overrides(command)
        if command.illustration or found is None:
            continue  # marked, or not a packlm command (pip, pytest, tensorboard)
        tool, args = found
        missing = [m for m in needed_plugins(args) if not _importable(m)]
        if missing:
            continue  # an extra's Hydra plugin is not installed (test_docs_commands says so)
        if "tokenizer.path=gpt2/" in args and not (cwd / "gpt2").is_dir():
            continue  # ../shared's GPT-2 files are absent
        args = [resolve(a, cwd, env) for a in args]
        head = ["train.py"] if tool == "train" else ["-m", f"packlm.{tool}"]
        run_line([*head, *args, *budget(tool, args)], cwd, env, str(command))
        ran.append(command.line)
    assert ran, f"{name}: no line of the block ran"


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
