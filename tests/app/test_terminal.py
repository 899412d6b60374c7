"""What a new user sees in the terminal (issue #38): each command's `--help`, `--cfg job`
validating, the progress bar's total, Lightning's device lines, cache change lines."""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys

import pytest

from helpers.runs import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _train_py(*argv: str, module: str | None = None):
    """`python train.py <argv>` (or `python -m <module>`): the process, and which of torch
    and Lightning it imported. Unlike helpers.processes, `__main__` is the module run (as
    with `python -m`), so its classes' source can be read."""
    run = (
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
        if module
        else "runpy.run_path('train.py', run_name='__main__')"
    )
    script = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('IMPORTED', [m for m in ('torch', 'lightning') "
        "if m in sys.modules], file=sys.stderr))\n"
        f"sys.argv = {[module or 'train.py', *argv]!r}\n"
        f"{run}\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=ENV)  # fmt: skip
    line = next((x for x in out.stderr.splitlines() if x.startswith("IMPORTED ")), "IMPORTED None")
    return out, ast.literal_eval(line.removeprefix("IMPORTED "))


# --- --help ------------------------------------------------------------------------------------


def test_train_help_names_the_command_and_its_keys_without_torch():
    out, imported = _train_py("--help")
    assert out.returncode == 0, out.stderr
    assert imported == []  # neither torch nor Lightning
    text = out.stdout
    assert text.startswith("usage: python train.py")
    assert "powered by Hydra" not in text
    # keys with the first line of their dataclass docstring
    assert "  train.max_supervised_tokens" in text
    assert "Stop after this many supervised targets" in text
    assert "model=large|medium|small" in text and "experiment=" in text
    assert all(len(line) <= 120 for line in text.splitlines())


TOOLS = {  # module: (usage start, a key it reads, a key it does not read)
    "packlm.prepare": ("python -m packlm.prepare", "  data.window", "  model.n_layer"),
    "packlm.stats": ("python -m packlm.stats", "  model.context_length", "  optim.lr"),
    "packlm.generate": ("python -m packlm.generate", "  temperature", "  data.window"),
    "packlm.evaluate": ("python -m packlm.evaluate", "  data.val_sources", "  optim.lr"),
    "packlm.export": ("python -m packlm.export", "  format", "  trainer.max_steps"),
}


@pytest.mark.parametrize("module", sorted(TOOLS))
def test_tool_help_shows_only_its_keys_without_torch(module):
    out, imported = _train_py("--help", module=module)
    assert out.returncode == 0, out.stderr
    assert imported == [], f"{module} --help imported {imported}"
    usage, read, unread = TOOLS[module]
    text = out.stdout
    assert text.startswith(f"usage: {usage}")
    assert read in text and unread not in text
    assert "powered by Hydra" not in text
    for group in ("callbacks=", "debug=", "logger="):  # train.py's groups are not theirs
        assert group not in text


@pytest.mark.parametrize("module", ["packlm.compare", "packlm.cache", "packlm.trace"])
def test_argparse_tools_answer_help_without_torch(module):
    out, imported = _train_py("--help", module=module)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: python -m {module}")
    assert imported == [], f"{module} --help imported {imported}"


def test_export_help_starts_with_its_own_keys():
    from packlm.commands.export.__main__ import ExportConfig
    from packlm.config.help import help_text

    keys = [line.split()[0] for line in help_text("export", ExportConfig).splitlines()
            if line.startswith("  ")]  # fmt: skip
    assert keys[:4] == ["format", "out", "overwrite", "ckpt_path"]
    assert "data.window" in keys and "tokenizer.vocab_size" in keys


def test_one_line_keeps_the_first_sentence():
    from packlm.config.help import one_line

    assert one_line("Tokens per step. More text (e.g. this).") == "Tokens per step."
    assert one_line("See e.g. the other key. Next.") == "See e.g. the other key."
    cut = one_line("word " * 40, width=30)
    assert len(cut) <= 30 and cut.endswith(" ...")


# --- --cfg job ---------------------------------------------------------------------------------


def test_cfg_job_refuses_what_a_run_refuses():
    out, _ = _train_py("--cfg", "job", "data.packing=zip")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "error: data.packing='zip'" in out.stderr
    assert "Traceback" not in out.stderr and "packing" not in out.stdout


def test_cfg_check_passes_a_valid_config(capsys):
    from packlm.config.precheck import precheck, validate_train

    def check(*argv: str) -> None:
        precheck("config", validate_train, list(argv))

    check("--cfg", "job", "data.window=64")  # no exit
    check("-m", "--cfg", "job", "data.packing=none,document")  # each value of a sweep
    for argv in (["-c", "job", "model.n_head=3"], ["-m", "data.packing=none,zip"]):
        with pytest.raises(SystemExit) as exited:  # with or without --cfg, in a sweep too
            check(*argv)
        assert exited.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: model.") and err[1].startswith("error: data.packing='zip'")


# --- the progress bar's total ------------------------------------------------------------------


def test_the_total_is_where_the_first_limit_ends_the_run():
    from packlm.callbacks.progress_bar import TokenBudget, bar_total, batches_left

    # a token budget of 150 batches in an epoch of 43687: the bar ends at 150, not 43687
    budget = TokenBudget(150 * 400, lambda tokens: tokens / 400)  # 400 targets a batch
    assert (
        bar_total(43687, 60, batches_left(None, 1, budget.batches_left(60 * 400), None, None))
        == 150
    )
    # a resume 300 batches into the epoch with 218 steps left ends at batch 518, not 218
    assert bar_total(43687, 300, batches_left(218, 1, None, None, None)) == 518
    # steps count optimizer steps: 4 batches each under accumulate_grad_batches=4
    assert bar_total(10_000, 0, batches_left(100, 4, None, None, None)) == 400
    # max_time: the time left at the pace measured (2 s a batch, 60 s left: 30 more)
    assert bar_total(10_000, 10, batches_left(950, 1, None, 60.0, 2.0)) == 40
    # the epoch ends first: its length; no limit but epochs: its length
    assert bar_total(218, 0, batches_left(950, 1, None, None, None)) == 218
    assert bar_total(218, 5, None) == 218
    assert budget.batches_left(10**9) == 0  # past the budget: nothing left


class _Totals(__import__("lightning").Callback):
    """The progress bar's total after each training batch."""

    def __init__(self):
        self.totals: list[float] = []

    def on_train_batch_end(self, trainer, *args):
        self.totals.append(trainer.progress_bar_callback.total_train_batches)
        self.epoch = trainer.num_training_batches


def test_a_token_budget_run_shows_its_own_length(compose_tiny, tmp_path, capsys, monkeypatch):
    from packlm.train import train

    monkeypatch.setattr("packlm.train.compose.has_terminal", lambda: True)  # the bar, as in one

    cfg = compose_tiny(
        "trainer.enable_progress_bar=true", "train.max_supervised_tokens=2000",
        "trainer.val_check_interval=1000", "train.sample_prompt=", "train.log_batch_images=false",
        "train.validate_at_end=false", "trainer.limit_val_batches=0",
    )  # fmt: skip
    totals = _Totals()
    train(cfg, run_dir=tmp_path / "run", callbacks=[totals])
    steps = len(totals.totals)
    assert 2 <= steps < 60 and totals.epoch > 2 * steps  # the epoch is longer than the run
    # the estimate from the expected tokens per batch: within a few batches of the real end
    assert all(abs(t - steps) <= max(2, steps // 4) for t in totals.totals), (steps, totals.totals)
    out = capsys.readouterr().out
    assert f"trained {steps} steps" in out
    assert f"{steps}/{steps}" in out  # the bar's last line: full, not 16/56


# --- Lightning's lines --------------------------------------------------------------------------


def test_no_device_lines_on_a_cpu_and_the_summary_says_why_the_run_stopped(
    compose_tiny, tmp_path, capsys
):
    """`GPU available: False` / `TPU available: False` and Lightning's "`Trainer.fit` stopped"
    (printed into the progress bar's line) are configured off at their logger; the summary
    names the limit that ended the run in the config's words."""
    from packlm.train import train

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    source = logging.getLogger("lightning.pytorch.utilities.rank_zero")  # rank_zero_info's
    source.addHandler(handler)
    try:
        train(compose_tiny("trainer.max_steps=3"), run_dir=tmp_path / "run")
    finally:
        source.removeHandler(handler)
    assert not [m for m in seen if "available: False" in m or "`Trainer.fit` stopped" in m]
    out = capsys.readouterr().out
    assert "trained 3 steps in" in out and "(trainer.max_steps=3 reached)" in out


def test_a_token_budget_summary_names_the_budget(compose_tiny, tmp_path, capsys):
    from packlm.train import train

    cfg = compose_tiny("train.max_supervised_tokens=600", "trainer.max_steps=1000")
    train(cfg, run_dir=tmp_path / "run")
    out = capsys.readouterr().out
    assert "(train.max_supervised_tokens=600 reached)" in out
