"""A packlm batch -> the keyword arguments of a Hugging Face causal LM's forward, documents
isolated (transformers >= 5; the extra packlm[hf]).

Two ways, the same logits (tests/model/test_hf.py: packed rows equal each document alone):
- `position_ids` (default): transformers' masking utils read a packed row from them (a
  position that is not its predecessor + 1 starts a new sequence; packlm restarts positions
  at every document start, and every PAD has position 0, so it stands alone). They do so
  only without a 2D attention_mask and without a cache, hence `use_cache=False`: with a
  cache (the configs' default) the documents of a row silently attend to each other.
- `4d`: packlm's own block-diagonal causal mask (`packlm.model.masks.additive_mask`),
  [B, 1, T, T] additive, which transformers passes to attention as it is: for models or
  attention implementations that do not detect packing from position_ids.

Labels stay with packlm's loss (`ExactStepLoss.step_loss`): they are already shifted, and a
Hugging Face model's own `labels=` would shift them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from packlm.model.masks import additive_mask

MASKS = ("position_ids", "4d")


def hf_inputs(
    batch: Mapping[str, Tensor], mask: str = "position_ids", dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """input_ids, position_ids, use_cache=False and, with mask="4d", the additive
    attention_mask in `dtype` (the model's compute dtype)."""
    if mask not in MASKS:
        raise ValueError(f"mask={mask!r}: expected one of {list(MASKS)}")
    kwargs = {
        "input_ids": batch["input_ids"],
        "position_ids": batch["position_ids"],
        "use_cache": False,
    }
    if mask == "4d":
        kwargs["attention_mask"] = additive_mask(batch["segment_ids"], dtype)
    return kwargs
