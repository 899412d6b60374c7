"""The one module that uses private names of torch and Lightning: each with the reason, the
upstream issue that would make it public, and a check in tests/test_shims.py that fails
loudly when an upgrade moves or changes it. Everything else in packlm uses public API only
(tests/test_no_private_api.py).
"""

from __future__ import annotations

import torch
from torch import Tensor


def foreach_mul_(tensors: list[Tensor], scalar: float) -> None:
    """Multiply every tensor in place by `scalar`, one fused kernel for the whole list.

    torch's foreach ops are private (pytorch/pytorch#58833; the public `torch.foreach` of
    pytorch/pytorch#193607 is not released): used where it exists."""
    public = getattr(torch, "foreach", None)
    if public is not None and hasattr(public, "mul_"):
        public.mul_(tensors, scalar)
    else:
        torch._foreach_mul_(tensors, scalar)


def foreach_norm(tensors: list[Tensor]) -> list[Tensor]:
    """The L2 norm of each tensor, one fused kernel (see `foreach_mul_`)."""
    public = getattr(torch, "foreach", None)
    if public is not None and hasattr(public, "norm"):
        return list(public.norm(tensors))
    return list(torch._foreach_norm(tensors))
