"""The exact loss with conversation masks: accumulation equals one big batch, a step with
no supervised target gives 0 (not NaN), and a packed conversation's logits are its own."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.models import PAD, V, tiny_model
from packlm.batch import make_batch
from packlm.tokenizer.chat import ChatFormat, supervised_table

# the accumulation harness of test_lit_module.py, by its path: `model` alone can name
# bench/model.py when a bench test put bench/ on sys.path first
_spec = importlib.util.spec_from_file_location(
    "lit_module_harness", Path(__file__).with_name("test_lit_module.py")
)
_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_harness)
T, assert_grads_equal, loader = _harness.T, _harness.assert_grads_equal, _harness.loader
make, reference_grads, trainer = _harness.make, _harness.reference_grads, _harness.trainer

pytestmark = [
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated"),
]
CHAT = ChatFormat(start_id=V - 3, end_id=V - 2)  # PAD is V - 1


def encode(text: str) -> list[int]:
    """A stand-in BPE below the control tokens: one id per character of a turn's content
    (q, a), one id for a header ("user\n") or the newline."""
    if set(text) <= {"q", "a"}:
        return [ord(c) % (V - 3) for c in text]
    return [len(text)]


def conversation(seed: int) -> tuple[list[int], bytes]:
    rng = np.random.default_rng(seed)
    turns = [("user", "q" * int(rng.integers(1, 4))), ("assistant", "a" * int(rng.integers(0, 3)))]
    ids, codes = CHAT.render(turns, encode)
    return ids, bytes(codes)


def chat_rows(*rows: list[int]) -> dict[str, torch.Tensor]:
    """Rows of packed conversations (seeds), each T+1 tokens read, PAD after."""
    table = supervised_table("assistant")
    tokens = np.full((len(rows), T + 1), PAD, np.int64)
    segments = np.full((len(rows), T + 1), -1, np.int32)
    supervised = np.zeros((len(rows), T + 1), bool)
    for r, seeds in enumerate(rows):
        at = 0
        for s, seed in enumerate(seeds):
            ids, codes = conversation(seed)
            n = min(len(ids), T + 1 - at)
            tokens[r, at : at + n] = ids[:n]
            segments[r, at : at + n] = s
            supervised[r, at : at + n] = table[np.frombuffer(codes, np.uint8)[:n]]
            at += n
    batch = make_batch(tokens, segments, "document", supervised=supervised)
    return {k: torch.from_numpy(v) for k, v in batch.items()}


MANY = chat_rows([1, 2], [3])
FEW = chat_rows([4], [])


def test_masked_targets_are_fewer_than_the_unmasked():
    n = int((MANY["labels"] != -100).sum())
    assert 0 < n < int((MANY["segment_ids"] >= 0).sum()) - 3


def test_accumulation_with_masks_equals_one_big_batch():
    expected, expected_loss = reference_grads(MANY, FEW)
    accumulated = make()
    trainer(max_steps=1, accumulate_grad_batches=2).fit(accumulated, loader(MANY, FEW))
    assert_grads_equal(accumulated.step_grads, expected)
    assert accumulated.losses == [pytest.approx(expected_loss, rel=1e-12)]


def test_a_step_of_context_only_gives_loss_zero_not_nan():
    context = {k: v.clone() for k, v in MANY.items()}
    context["labels"][:] = -100  # e.g. rows holding only user turns
    model = make()
    trainer(max_steps=1).fit(model, loader(context))
    assert model.losses == [0.0] and not math.isnan(model.losses[0])
    assert all(g is None or torch.count_nonzero(g) == 0 for g in model.step_grads.values())


def test_a_packed_conversation_gives_the_logits_it_gives_alone():
    model = tiny_model(context_length=T)
    packed = chat_rows([5, 6])
    logits = model(packed["input_ids"], packed["segment_ids"], packed["position_ids"])
    at = 0
    for seed in (5, 6):
        ids = torch.tensor([conversation(seed)[0]])
        n = min(ids.shape[1], T - at)
        alone = model(ids[:, :n], torch.zeros_like(ids[:, :n], dtype=torch.int32),
                      torch.arange(n)[None])  # fmt: skip
        torch.testing.assert_close(logits[:, at : at + n], alone, atol=1e-10, rtol=0)
        at += n
