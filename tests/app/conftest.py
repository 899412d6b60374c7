"""Fixtures of the application tests: the tiny run as arguments or as a composed config."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from helpers.runs import tiny_overrides
from packlm.config.schema import CONFIG_DIR


@pytest.fixture
def tiny_args(tiny_corpus, tmp_path_factory) -> list[str]:
    """The tiny overrides as command-line arguments."""
    return tiny_overrides(tiny_corpus, tmp_path_factory.getbasetemp() / "cache")


@pytest.fixture
def compose_tiny(tiny_corpus, tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "cache"

    def _compose(*extra: str):
        with initialize_config_dir(CONFIG_DIR, version_base=None):
            return compose("config", overrides=tiny_overrides(tiny_corpus, cache, *extra))

    return _compose
