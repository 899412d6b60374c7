"""The run's log states the model's size and whether its embedding is tied to the head."""

from __future__ import annotations

import logging

import pytest

from packlm.model.lit_module import LitCausalLM
from packlm.train.report import log_model_size

MODEL = dict(vocab_size=64, context_length=8, n_layer=1, n_head=2, n_embd=16)


@pytest.mark.parametrize("tied", [False, True])
def test_the_size_line_counts_the_embedding_and_says_if_it_is_tied(caplog, tied):
    lit = LitCausalLM(dict(MODEL, tie_embeddings=tied))
    caplog.set_level(logging.INFO, logger="packlm.train.report")
    log_model_size(lit)
    n = sum(p.numel() for p in lit.parameters())
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("model: ")]
    where = "the embedding, tied to the head" if tied else "the embedding"
    assert line == f"model: {n / 1e6:.2f}M parameters ({64 * 16 / 1e6:.2f}M in {where})"
