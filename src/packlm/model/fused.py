"""RMSNorm and rotary as single autograd Functions: the same values, about half the kernels.

Why: at nanoGPT's CPU shape (width 128, 768 tokens a step) an eager step is bound by
kernel launches, not FLOPs. Autograd of the composite `F.rms_norm` runs about 16 kernels
per call and rotary's chunk/mul/cat about 20 per layer; with their backward written out
by hand they take 10 and 8 (bench/model.py measures the step). Under `torch.compile`, and
for dtypes other than float32/float64, the composite forms run instead: inductor fuses
them itself, and the composite keeps its own rules for reduced precision.
tests/model/test_fused.py checks values and gradients against the composite forms.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

_EXACT = (torch.float32, torch.float64)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x [..., C] -> x / sqrt(mean(x^2) + eps) * weight, like F.rms_norm."""
    if torch.compiler.is_compiling() or x.dtype not in _EXACT or weight.dtype != x.dtype:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return _RMSNorm.apply(x, weight, eps)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x[..., i], x[..., i + D/2]) of x [B, H, T, D] by angles [B, 1, T, D/2]."""
    if torch.compiler.is_compiling():
        return _rotate_composite(x, cos, sin)
    return _Rotate.apply(x, cos, sin)


def _rotate_composite(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # [B, H, T, D/2] each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # [B, H, T, D]


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        C = x.shape[-1]
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # [..., 1]
        rstd = norm.square_().div_(C).add_(eps).rsqrt_()  # [..., 1]
        xhat = x * rstd  # [..., C]
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        # y = w * x * r, r = (mean(x^2) + eps)^-1/2: dx = r * (g*w - xhat * mean(g*w*xhat))
        xhat, rstd, weight = ctx.saved_tensors
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            g_xhat = grad * weight  # [..., C]
            dot = (g_xhat * xhat).mean(dim=-1, keepdim=True)  # [..., 1]
            grad_x = g_xhat.addcmul_(xhat, dot, value=-1).mul_(rstd)
        if ctx.needs_input_grad[1]:
            grad_w = (grad * xhat).flatten(0, -2).sum(dim=0)  # [C]
        return grad_x, grad_w, None


class _Rotate(torch.autograd.Function):
    """Forward rotates by +angle; the backward rotates the gradient by -angle (the
    transpose of a rotation). Both write their halves into one new tensor: no cat."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        ctx.save_for_backward(cos, sin)
        return _turn(x, cos, sin, sign=1.0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        return _turn(grad, cos, sin, sign=-1.0), None, None


def _turn(x: Tensor, cos: Tensor, sin: Tensor, sign: float) -> Tensor:
    """(x1 cos - sign x2 sin, x2 cos + sign x1 sin) into one contiguous [B, H, T, D]."""
    x1, x2 = x.chunk(2, dim=-1)  # [B, H, T, D/2] each
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, cos.dtype), device=x.device)
    o1, o2 = out.chunk(2, dim=-1)
    torch.mul(x1, cos, out=o1).addcmul_(x2, sin, value=-sign)
    torch.mul(x2, cos, out=o2).addcmul_(x1, sin, value=sign)
    return out
