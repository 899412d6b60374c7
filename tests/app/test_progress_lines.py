"""A run whose output goes to a file (SLURM, nohup, CI: no terminal, so no bar) says that it
is alive and how it ended (issue #47): a progress line at the configured interval, one line
per validation, and the run folder's job.log ends with the console's summary."""

from __future__ import annotations

import re

from helpers.runs import run_train, tiny_overrides


def test_without_a_terminal_a_run_logs_progress_validations_and_its_summary(tiny_corpus, tmp_path):
    run = tmp_path / "run"
    args = tiny_overrides(tiny_corpus, tmp_path / "cache", steps=6, val_every=3)
    args += [
        "trainer.enable_progress_bar=true",  # the default: no terminal turns it into lines
        "train.progress_every_n_steps=2",
        "train.progress_every_seconds=null",
        f"hydra.run.dir={run}",
    ]
    done = run_train(args, cwd=tmp_path)  # stdout and stderr are pipes, not a terminal
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    steps = re.findall(r"step (\d+)/(\d+) \| epoch 0 \| loss [\d.]+ \| [\d,]+ tokens/s \| "
                       r"[\d,]+ supervised tokens \| [\d:]+ elapsed, ETA [\d:]+", console)  # fmt: skip
    assert steps == [("2", "6"), ("4", "6"), ("6", "6")]  # every 2 steps, of the bar's total
    validations = re.findall(
        r"validation at step (\d+): val/loss [\d.]+, val/bpb [\d.]+ \(took \d+\.\d s\)", console
    )
    assert validations == ["3", "6"]  # with how long each took
    # and when each started: a large validation set is otherwise minutes of silence
    started = re.findall(r"validating at step (\d+) \((\d+) batches\) \.\.\.", console)
    assert [s for s, _ in started] == ["3", "6"] and all(int(n) > 0 for _, n in started)
    assert console.index("validating at step 3") < console.index("validation at step 3:")

    job_log = (run / "job.log").read_text()
    assert re.findall(r"validation at step (\d+):", job_log) == ["3", "6"]
    summary = done.stdout[done.stdout.index("trained 6 steps") :].strip().splitlines()
    assert summary[-1].startswith("TensorBoard: ") and any("val/bpb" in x for x in summary)
    assert job_log.rstrip().endswith("\n".join(summary))  # job.log ends with the summary
