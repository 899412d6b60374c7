"""`python -m packlm.trace` explains only the run's own data (issue #47): a changed source is
refused naming the file; moved sources are traced from the run's cached store; with neither,
one line names the path; a step past the run's last is said to be so; a rebuild says why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers.corpus import write_tiny_corpus
from helpers.runs import subprocess_env, tiny_overrides
from packlm.commands.trace import main as trace
from packlm.config.schema import CONFIG_DIR
from packlm.train import train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 4-step run on its own corpus and cache (the tests change both, then put them back)."""
    from hydra import compose, initialize_config_dir

    root = tmp_path_factory.mktemp("trace_run")
    corpus = write_tiny_corpus(root / "corpus")
    overrides = tiny_overrides(corpus, root / "cache", steps=4, val_every=4, lean=True)
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=False)
    run_dir = root / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    from omegaconf import OmegaConf

    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))  # as Hydra saves it
    train(cfg, run_dir=run_dir)
    return run_dir, corpus, root / "cache"


def traced(run_dir, capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = trace([str(run_dir), *args])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("target", ["run dir", "checkpoint"])
def test_a_changed_source_is_refused_naming_the_file(run, capsys, target):
    run_dir, corpus, _ = run
    path = run_dir if target == "run dir" else run_dir / "checkpoints" / "last.ckpt"
    code, before, err = traced(path, capsys, "step=2")
    assert code == 0 and before.startswith("step 2: epoch 0"), err
    doc = corpus / "doc003.txt"
    text, stat = doc.read_bytes(), doc.stat()
    try:
        doc.write_bytes(text + b" and one more sentence.\n")
        code, out, err = traced(path, capsys, "step=2")
        assert code != 0 and not out  # it used to build a new store and explain its plan
        assert f"{doc} (modified)" in err and "the plan would differ" in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    finally:
        doc.write_bytes(text)
        os.utime(doc, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert traced(path, capsys, "step=2")[:2] == (0, before)  # put back: traced again


def test_moved_sources_are_traced_from_the_runs_cached_store(run, capsys):
    run_dir, corpus, cache = run
    code, before, _ = traced(run_dir, capsys, "step=2")
    moved = corpus.with_name("corpus-moved")
    corpus.rename(moved)
    try:
        code, out, err = traced(run_dir, capsys, "step=2")
        assert code == 0, err  # it used to be a traceback ending in SourceError
        assert out == before
        stores = cache / "stores"
        away = cache.with_name("stores-away")
        stores.rename(away)
        try:  # neither the sources nor the store: one line naming the path
            code, out, err = traced(run_dir, capsys, "step=2")
            assert code != 0 and not out and "Traceback" not in err
            (line,) = err.strip().splitlines()
            assert f"{corpus}/*.txt" in line and "the glob matched no files" in line
            assert f"not in {stores}" in line
        finally:
            away.rename(stores)
    finally:
        moved.rename(corpus)


def test_a_step_past_the_runs_last_is_said_to_be_untrained(run, capsys):
    run_dir, _, _ = run
    code, out, err = traced(run_dir, capsys, "step=3")
    assert code == 0 and "past the run's last" not in err
    code, out, err = traced(run_dir, capsys, "step=9")
    assert code == 0 and out.startswith("step 9")
    assert "note: step 9 is past the run's last trained step (4" in err


def test_a_damaged_store_is_rebuilt_saying_why(run, capsys):
    """In a process of its own, as a user runs it (logging is not configured by pytest)."""
    run_dir, _, cache = run
    code, before, _ = traced(run_dir, capsys, "step=2")
    (tokens,) = (cache / "stores").glob("*/train/tokens.bin")
    tokens.write_bytes(tokens.read_bytes()[:-8])  # cut short
    done = subprocess.run([sys.executable, "-m", "packlm.trace", str(run_dir), "step=2"],
                          capture_output=True, text=True, timeout=300, env=subprocess_env())  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == before.strip()  # the same store again
    assert "the cached store is damaged, rebuilding" in done.stderr  # it used to say nothing


def test_a_saved_config_using_packlms_resolvers_is_traced_in_a_fresh_process(run, tmp_path):
    """A preset's saved config keeps `${packlm.project_dir:}` unresolved (experiment=shakespeare
    did): `python -m packlm.trace` resolved it without packlm's resolvers and failed."""
    run_dir, _, _ = run
    copy = tmp_path / "run"
    (copy / ".hydra").mkdir(parents=True)
    saved = (run_dir / ".hydra" / "config.yaml").read_text()
    assert "sample_prompt: ''" in saved
    saved = saved.replace("sample_prompt: ''", "sample_prompt: ${packlm.project_dir:}")
    (copy / ".hydra" / "config.yaml").write_text(saved)
    (copy / "checkpoints").symlink_to(run_dir / "checkpoints")
    done = subprocess.run([sys.executable, "-m", "packlm.trace", str(copy), "step=2"],
                          capture_output=True, text=True, timeout=300, env=subprocess_env())  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("step 2:")
