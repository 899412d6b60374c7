"""Export fixtures: a tiny trained tokenizer and a checkpoint shaped like train.py's."""

from __future__ import annotations

import pytest

from helpers.exports import SPECIALS, TEXTS, write_checkpoint
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Tokenizer:
    vocab, merges = train_bpe_from_iterator(TEXTS * 4, 320, SPECIALS, num_workers=1)
    return Tokenizer(vocab, merges, SPECIALS)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory, tiny_tokenizer):
    """(checkpoint path, the LitCausalLM it holds)."""
    path = tmp_path_factory.mktemp("ckpt") / "last.ckpt"
    return path, write_checkpoint(path, tiny_tokenizer)
