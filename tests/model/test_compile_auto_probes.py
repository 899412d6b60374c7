"""model.compile=auto's one line on runs whose length is not trainer.max_steps: one epoch
(max_steps=-1 max_epochs=1), fast_dev_run, a token budget. The machine is faked as one
where compiling pays for runs of >= 100 steps; nothing compiles for real (torch.compile
raises if called)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from hydra import compose, initialize_config_dir

from helpers.logs import logged
from helpers.runs import tiny_overrides
from packlm.config import compile_choice
from packlm.config.schema import CONFIG_DIR
from packlm.train import train

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated"),
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
]


@pytest.fixture
def pays_from_100_steps(monkeypatch):
    """An AVX512 CPU where compiled steps pay for runs of >= 100 steps; the compiler probe
    and torch.compile record that they were asked (they must not be, for short runs)."""
    asked = []
    monkeypatch.setattr(compile_choice, "CPU_KINDS_THAT_PAY", frozenset({"AVX512"}))
    monkeypatch.setattr(compile_choice, "cpu_kind", lambda: "AVX512")
    monkeypatch.setattr(compile_choice, "MIN_STEPS", 100)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(
        compile_choice, "compiler_works", lambda: (asked.append(1), (True, "probe"))[1]
    )
    monkeypatch.setattr(torch, "compile", lambda fn: asked.append(fn) or fn)
    return asked


@contextmanager
def said():
    """The messages of packlm.train.compose that name model.compile."""
    lines: list[str] = []
    with logged("packlm.train.compose") as records:
        yield lines
    lines += [r.getMessage() for r in records if "model.compile" in r.getMessage()]


def run(corpus, tmp_path, *extra):
    overrides = tiny_overrides(corpus, tmp_path / "cache", *extra, steps=4, val_every=2, lean=True)
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=overrides)
    run_dir = tmp_path / "run"
    train(cfg, run_dir=run_dir)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    return torch.load(ckpt, weights_only=False)["global_step"] if ckpt.exists() else None


def test_one_epoch_counts_its_steps_not_no_limit(tiny_corpus, tmp_path, pays_from_100_steps):
    """Before: '(CPU AVX512, no step or time limit, C++ compiler works (probe))' and a compile
    for a run of a few steps (its length: trainer.max_epochs=1, not a step limit)."""
    with said() as lines:
        steps = run(tiny_corpus, tmp_path, "trainer.max_steps=-1", "trainer.max_epochs=1")
    assert 0 < steps < 100
    assert lines == [
        f"model.compile=auto: off ({steps} steps: too short to repay the "
        f"~{compile_choice.COMPILE_SECONDS} s compile)"
    ]
    assert pays_from_100_steps == []  # no probe, no compile


def test_two_epochs_under_a_batch_limit_count_both(tiny_corpus, tmp_path, pays_from_100_steps):
    with said() as lines:
        steps = run(
            tiny_corpus, tmp_path, "trainer.max_steps=-1", "trainer.max_epochs=2",
            "trainer.limit_train_batches=3", "trainer.accumulate_grad_batches=1",
        )  # fmt: skip
    assert steps == 6 and lines[0].startswith("model.compile=auto: off (6 steps: too short")


def test_fast_dev_run_is_one_step(tiny_corpus, tmp_path, pays_from_100_steps):
    with said() as lines:
        run(tiny_corpus, tmp_path, "debug=fdr")
    assert lines == [
        f"model.compile=auto: off (1 step: too short to repay the "
        f"~{compile_choice.COMPILE_SECONDS} s compile)"
    ]
    assert pays_from_100_steps == []


def test_a_token_budget_counts_the_steps_it_takes(tiny_corpus, tmp_path, pays_from_100_steps):
    with said() as lines:
        steps = run(tiny_corpus, tmp_path, "train.max_supervised_tokens=1500")
    (line,) = lines
    planned = int(line.split("(")[1].split(" step")[0])
    assert line.startswith("model.compile=auto: off (") and "too short" in line
    assert abs(planned - steps) <= 1  # the budget's expected steps, as trained
    assert pays_from_100_steps == []


def test_a_long_epoch_run_compiles(tiny_corpus, tmp_path, monkeypatch, pays_from_100_steps):
    monkeypatch.setattr(compile_choice, "MIN_STEPS", 2)
    with said() as lines:
        steps = run(tiny_corpus, tmp_path, "trainer.max_steps=-1", "trainer.max_epochs=1")
    assert lines == [
        f"model.compile=auto: on (CPU AVX512, {steps} steps, C++ compiler works (probe))"
    ]
    assert len(pays_from_100_steps) == 3  # the probe, then the model and its trunk compiled
