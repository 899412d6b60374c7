"""Fixtures for the application tests: a tiny corpus and a fast config."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from packlm.config import CONFIG_DIR

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "that",
    "is",
    "was",
    "he",
    "for",
    "it",
    "with",
    "as",
    "his",
    "on",
    "be",
    "at",
    "by",
    "had",
    "not",
    "are",
    "but",
    "from",
]


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """Sixty small documents of pseudo-English, one file each."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for i in range(60):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 120))]
        (root / f"doc{i:03d}.txt").write_text(" ".join(words) + ".\n", encoding="utf-8")
    return root


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
