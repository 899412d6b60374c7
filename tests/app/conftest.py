"""Fixtures for the application tests: a tiny corpus and a fast config."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from packlm.config import CONFIG_DIR
from tiny_corpus import write_tiny_corpus


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """Sixty small documents of pseudo-English, one file each."""
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"))


def tiny_overrides(corpus: Path, cache: Path) -> list[str]:
    return [
        f"data.sources=[{corpus}/*.txt]",
        "data.val_fraction=0.2",
        "data.window=32",
        "data.stride=16",
        "data.batch_size=4",
        "data.num_workers=0",
        "tokenizer.vocab_size=300",
        "model.context_length=32",
        "model.n_layer=1",
        "model.n_head=2",
        "model.n_embd=32",
        "optim.warmup_steps=2",
        "trainer.max_steps=6",
        "trainer.val_check_interval=3",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "train.sample_tokens=8",
        f"cache_dir={cache}",
    ]


@pytest.fixture
def tiny_args(tiny_corpus, tmp_path_factory) -> list[str]:
    """The tiny overrides as command-line arguments."""
    return tiny_overrides(tiny_corpus, tmp_path_factory.getbasetemp() / "cache")


@pytest.fixture
def compose_tiny(tiny_corpus, tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "cache"

    def _compose(*extra: str):
        with initialize_config_dir(CONFIG_DIR, version_base=None):
            return compose("config", overrides=[*tiny_overrides(tiny_corpus, cache), *extra])

    return _compose
