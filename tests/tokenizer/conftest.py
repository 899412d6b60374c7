"""Tokenizer fixtures: a small tokenizer trained on stdlib sources (always available)."""

from __future__ import annotations

import itertools

import pytest

from packlm.data.store.default_corpus import iter_default_documents
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator

SPECIALS = ["<|endoftext|>", "<|pad|>"]


@pytest.fixture(scope="session")
def stdlib_docs() -> list[str]:
    """About 40 stdlib source files: code, prose in docstrings, some non-ASCII."""
    return [text for _, text in itertools.islice(iter_default_documents(), 0, 400, 10)]


@pytest.fixture(scope="session")
def small_vocab(stdlib_docs):
    return train_bpe_from_iterator(stdlib_docs, 1000, SPECIALS, num_workers=1)


@pytest.fixture(scope="session")
def small_tokenizer(small_vocab) -> Tokenizer:
    vocab, merges = small_vocab
    return Tokenizer(vocab, merges, SPECIALS)


@pytest.fixture(scope="session")
def gpt2_tokenizer(golden_bpe) -> Tokenizer:
    return Tokenizer.from_files(
        golden_bpe / "gpt2_vocab.json", golden_bpe / "gpt2_merges.txt", ["<|endoftext|>"]
    )
