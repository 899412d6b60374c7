"""Issue #59, family 3, for sampling (`python -m packlm.generate`, TensorBoard samples): what a
step costs follows the context the model reads, not the number of tokens asked for or the
prompt's length, and any temperature the options accept samples.

Before: every step copied all ids so far (prompt and tokens sampled) into a new tensor, so
`max_new_tokens=10**12` with a model that never ends a text cost a copy growing with every
token (quadratic time); `temperature=1e-300` divided logits into inf, whose softmax is NaN:
a RuntimeError traceback from torch.multinomial."""

from __future__ import annotations

import pytest
import torch

from packlm.model.sampling import sample_tokens

VOCAB = 11


def never_stops(seen: list[int]):
    """Logits that favour id (last id + 1) % (VOCAB - 1), never the stop id VOCAB - 1; records
    each input length."""

    def logits_fn(ids: torch.Tensor) -> torch.Tensor:  # [1, T] -> [1, T, V]
        seen.append(ids.shape[1])
        logits = torch.zeros(1, ids.shape[1], VOCAB)
        logits[0, -1, (int(ids[0, -1]) + 1) % (VOCAB - 1)] = 3.0
        logits[0, -1, VOCAB - 1] = -50.0  # the stop id
        return logits

    return logits_fn


def test_each_step_copies_at_most_the_context(monkeypatch):
    seen: list[int] = []
    copied: list[int] = []
    cat = torch.cat

    def counting_cat(tensors, *args, **kwargs):
        out = cat(tensors, *args, **kwargs)
        copied.append(out.numel())
        return out

    monkeypatch.setattr(torch, "cat", counting_cat)
    prompt = [1] * 100_000  # a long prompt: only its last 8 ids are read
    new = sample_tokens(never_stops(seen), prompt, 2_000, 8, temperature=1.0, stop_id=VOCAB - 1)
    assert len(new) == 2_000 and VOCAB - 1 not in new
    assert max(seen) == 8 and seen[0] == 8
    assert copied and max(copied) <= 9  # was 100,001 + step


@pytest.mark.parametrize("temperature", [1e-300, 5e-324, 1e-30])
def test_a_tiny_temperature_samples_the_greedy_ids(temperature):
    greedy = sample_tokens(never_stops([]), [3], 40, 4, temperature=0.0)
    tiny = sample_tokens(never_stops([]), [3], 40, 4, temperature=temperature, top_k=None)
    assert tiny == greedy == [(3 + 1 + k) % (VOCAB - 1) for k in range(40)]


def test_a_context_of_one_reads_one_id():
    seen: list[int] = []
    sample_tokens(never_stops(seen), [1, 2, 3], 20, 1, temperature=0.0)
    assert set(seen) == {1}
