"""Settings given but without effect in the run (the muon_* keys without optim=muon,
optim.warmdown_ratio under the cosine, optim.anneal_by_time without trainer.max_time) are
named in one warning at the start, and settings the run uses are not."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import pytest
from hydra import compose, initialize_config_dir

from helpers.logs import logged
from helpers.runs import tiny_overrides
from packlm.config.model import OptimConfig
from packlm.config.schema import CONFIG_DIR
from packlm.train import train

pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated")


def run(corpus, tmp_path, *extra):
    overrides = tiny_overrides(corpus, tmp_path / "cache", *extra, steps=2, val_every=2, lean=True)
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        train(compose("config", overrides=overrides), run_dir=tmp_path / "run")


def test_ignored_names_what_changes_nothing():
    given = {"muon_lr": 0.05, "muon_momentum": 0.9, "warmdown_ratio": 0.3, "anneal_by_time": True}
    assert OptimConfig.from_mapping(given).ignored(time_limit=False) == [
        "optim.muon_lr=0.05 (optim.algorithm=adamw: give optim=muon)",
        "optim.muon_momentum=0.9 (optim.algorithm=adamw: give optim=muon)",
        "optim.warmdown_ratio=0.3 (optim.schedule=cosine)",
        "optim.anneal_by_time=true (no trainer.max_time)",
    ]
    used = dict(given, algorithm="muon", schedule="wsd")
    assert OptimConfig.from_mapping(used).ignored(time_limit=True) == []
    assert OptimConfig().ignored(time_limit=False) == []  # the defaults: nothing said


# --- settings that change nothing in the run: said, not silently dropped ----------------------


@contextmanager
def warned():
    """The warnings of packlm.train.compose that name settings with no effect."""
    lines: list[str] = []
    with logged("packlm.train.compose", logging.WARNING) as records:
        yield lines
    lines += [r.getMessage() for r in records if "no effect" in r.getMessage()]


def test_muon_keys_without_optim_muon_are_said_to_change_nothing(tiny_corpus, tmp_path):
    """Before: optim.muon_lr=0.05 without optim=muon trained AdamW without a word."""
    with warned() as lines:
        run(tiny_corpus, tmp_path, "optim.muon_lr=0.05", "optim.warmdown_ratio=0.3",
            "optim.anneal_by_time=true", "optim.muon_ns_dtype=float32")  # fmt: skip
    assert lines == [
        "these settings have no effect in this run: optim.muon_lr=0.05 (optim.algorithm=adamw: "
        "give optim=muon); optim.muon_ns_dtype=float32 (optim.algorithm=adamw: give "
        "optim=muon); optim.warmdown_ratio=0.3 (optim.schedule=cosine); "
        "optim.anneal_by_time=true (no trainer.max_time)"
    ]


def test_settings_the_run_uses_are_not_named(tiny_corpus, tmp_path):
    with warned() as lines:
        run(tiny_corpus, tmp_path, "optim=muon", "optim.muon_lr=0.05", "optim.schedule=wsd",
            "optim.warmdown_ratio=0.3", "optim.anneal_by_time=true", "trainer.max_time=00:00:10:00")  # fmt: skip
    assert lines == []
