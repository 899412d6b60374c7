"""bench/recipe.py, the recipe options against the defaults: every option is a valid config,
and a run of two options at equal steps comes back as rows with val/bpb, steps and the load."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from packlm.config.schema import CONFIG_DIR, validate_config

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "recipe.py"


def options() -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("recipe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OPTIONS


@pytest.mark.parametrize("name", list(options()))
def test_every_option_composes_and_validates(name):
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=options()[name])
    validated = validate_config(cfg)
    assert validated.optim.algorithm == ("muon" if "optim=muon" in options()[name] else "adamw")


@pytest.mark.slow
def test_two_options_at_equal_steps_come_back_as_rows(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for module in (argparse, json, subprocess, importlib.util, pytest, sys.modules["dataclasses"]):
        source = Path(module.__file__)
        (corpus / f"{source.parent.name}_{source.name}").write_bytes(source.read_bytes())
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--corpus", f"'{corpus}/*.py'", "--steps", "3",
         "--names", "baseline", "muon", "--out", str(tmp_path / "out"),
         "--cache", str(tmp_path / "cache"), "tokenizer.vocab_size=300", "data.val_fraction=0.3"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["option"] for r in rows] == ["baseline", "muon"]
    for row in rows:
        assert "error" not in row, row.get("error")
        assert row["steps"] == 3 and 0 < row["val_bpb"] < 16 and row["load_before"] >= 0
