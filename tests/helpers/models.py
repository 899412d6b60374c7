"""Small builders shared by the model tests: packed rows made by hand, tiny models."""

from __future__ import annotations

import torch

from packlm.model import ModelConfig, Transformer

V = 53  # vocabulary of the tiny test models
PAD = V - 1


def tiny_config(**overrides) -> ModelConfig:
    base = dict(vocab_size=V, context_length=32, n_layer=2, n_head=4, n_embd=32)
    return ModelConfig(**{**base, **overrides})


def tiny_model(dtype=torch.float64, seed=0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_config(**overrides)).to(dtype)


def pack_row(docs: list[list[int]], T: int) -> dict[str, torch.Tensor]:
    """One packed row in `document` mode: docs back to back, PAD after, labels inside each doc."""
    ids, seg, pos, labels = [], [], [], []
    for s, doc in enumerate(docs):
        ids += doc
        seg += [s] * len(doc)
        pos += list(range(len(doc)))
        labels += doc[1:] + [-100]  # no target across a document end
    n_pad = T - len(ids)
    assert n_pad >= 0
    ids += [PAD] * n_pad
    seg += [-1] * n_pad
    pos += list(range(n_pad))
    labels += [-100] * n_pad
    return {
        "input_ids": torch.tensor([ids]),
        "labels": torch.tensor([labels]),
        "segment_ids": torch.tensor([seg], dtype=torch.int32),
        "position_ids": torch.tensor([pos]),
    }


def cat_rows(*batches: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.cat([b[k] for b in batches]) for k in batches[0]}


def random_docs(lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, PAD, (n,), generator=g).tolist() for n in lengths]
