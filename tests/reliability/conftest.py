"""Fixtures of the reliability tests: one cache for the session, the composed reliability run."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from helpers.runs import reliability_overrides
from packlm.config.schema import CONFIG_DIR


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One tokenizer/store cache for the session (a run with the tiny corpus builds it once)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def compose_tiny(tiny_corpus, cache_dir):
    def _compose(*extra: str):
        with initialize_config_dir(CONFIG_DIR, version_base=None):
            return compose(
                "config", overrides=reliability_overrides(tiny_corpus, cache_dir, *extra)
            )

    return _compose
