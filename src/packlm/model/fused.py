"""RMSNorm, the attention heads and SwiGLU as single autograd Functions: the same values,
fewer kernels and no concatenations.

Why: at nanoGPT's CPU shape (width 128, 768 tokens a step) an eager step is bound by
kernel launches and memory passes, not FLOPs. Autograd of the composite `F.rms_norm` runs
about 16 kernels per call, rotary's chunk/mul/cat about 20 per layer; and the backward of
every split or chunk (qkv -> q, k, v; gate_up -> gate, up) is a `cat` of strided gradients,
the slowest copies of the step. With the backward written out by hand, each gradient is
written once, in place, into the slice it belongs to (bench/model.py measures the step).
Under `torch.compile` the composite forms run instead (inductor fuses them itself), and
RMSNorm keeps F.rms_norm's own rules for reduced precision.
tests/model/test_fused.py checks values and gradients against the composite forms.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

_EXACT = (torch.float32, torch.float64)


def matmul_dtype(x: Tensor) -> torch.dtype:
    """The dtype a matmul taking x runs in: autocast's where it is on for x's device, else x's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x [..., C] -> x / sqrt(mean(x^2) + eps) * weight, like F.rms_norm; under autocast the
    result comes in autocast's dtype, rounded once, as the next matmul would take it."""
    if torch.compiler.is_compiling() or x.dtype not in _EXACT or weight.dtype != x.dtype:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return _RMSNorm.apply(x, weight, eps, matmul_dtype(x))


def split_heads(qkv: Tensor, cos: Tensor, sin: Tensor, n_head: int) -> tuple[Tensor, ...]:
    """qkv [B, T, 3C] -> q, k, v [B, H, T, D] in cos's dtype, q and k rotated."""
    if torch.compiler.is_compiling():
        return _split_heads_composite(qkv, cos, sin, n_head)
    return _SplitHeads.apply(qkv, cos, sin, n_head)


def swiglu(gate_up: Tensor) -> Tensor:
    """gate_up [..., 2F] -> silu(gate) * up [..., F]."""
    if torch.compiler.is_compiling():
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up
    return _SwiGLU.apply(gate_up)


def _split_heads_composite(qkv: Tensor, cos: Tensor, sin: Tensor, n_head: int):
    B, T, C3 = qkv.shape
    C, H = C3 // 3, n_head
    qk, v = qkv.to(cos.dtype).split([2 * C, C], dim=-1)  # [B, T, 2C], [B, T, C]
    qk = qk.view(B, T, 2 * H, C // H).transpose(1, 2)  # [B, 2H, T, D]
    q, k = _rotate_composite(qk, cos, sin).chunk(2, dim=1)  # [B, H, T, D] each
    return q, k, v.view(B, T, H, C // H).transpose(1, 2)


def _rotate_composite(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # [B, H, T, D/2] each
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin  # [B, H, T, D]: Llama's rotate_half


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float, out_dtype: torch.dtype | None):
        C = x.shape[-1]
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # [..., 1]
        rstd = norm.square_().div_(C).add_(eps).rsqrt_()  # [..., 1]
        xhat = x * rstd  # [..., C]
        ctx.save_for_backward(xhat, rstd, weight)
        out = torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)
        return torch.mul(xhat, weight, out=out)  # computed in x's dtype, rounded on the write

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        # y = w * x * r, r = (mean(x^2) + eps)^-1/2: dx = r * (g*w - xhat * mean(g*w*xhat))
        xhat, rstd, weight = ctx.saved_tensors
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            g_xhat = grad * weight  # [..., C]
            dot = (g_xhat * xhat).mean(dim=-1, keepdim=True)  # [..., 1]
            grad_x = g_xhat.addcmul_(xhat, dot, value=-1).mul_(rstd)
        if ctx.needs_input_grad[1]:
            grad_w = (grad * xhat).flatten(0, -2).sum(dim=0)  # [C]
        return grad_x, grad_w, None, None


class _SplitHeads(torch.autograd.Function):
    """The heads are strided views of qkv: each is copied once into its own contiguous tensor
    in the attention dtype, q and k then rotated there. The backward rotates dq and dk back
    and writes them, and dv, straight into their slices of one [B, T, 3C] gradient."""

    @staticmethod
    def forward(ctx, qkv: Tensor, cos: Tensor, sin: Tensor, n_head: int):
        B, T, C3 = qkv.shape
        H, D = n_head, C3 // 3 // n_head
        heads = qkv.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # [3, B, H, T, D], a view
        dtype = torch.promote_types(qkv.dtype, cos.dtype)
        qk = torch.empty((2, B, H, T, D), dtype=dtype, device=qkv.device).copy_(heads[:2])
        v = torch.empty((B, H, T, D), dtype=cos.dtype, device=qkv.device).copy_(heads[2])
        q, k = _rotate(qk, cos, sin, sign=1.0)  # [B, H, T, D] each
        ctx.save_for_backward(cos, sin)
        ctx.qkv_dtype, ctx.qkv_shape, ctx.n_head = qkv.dtype, qkv.shape, n_head
        ctx.set_materialize_grads(False)  # an unused head's gradient: None, a zeroed slice
        return q, k, v

    @staticmethod
    def backward(ctx, dq: Tensor, dk: Tensor, dv: Tensor):
        cos, sin = ctx.saved_tensors
        (B, T, C3), H = ctx.qkv_shape, ctx.n_head
        grad = torch.empty((B, T, C3), dtype=ctx.qkv_dtype, device=cos.device)
        slots = grad.view(B, T, 3, H, C3 // 3 // H).permute(2, 0, 3, 1, 4)  # [3, B, H, T, D]
        for g, slot in zip((dq, dk), slots[:2], strict=True):
            if g is None:
                slot.zero_()
            else:
                slot.copy_(_rotate(g, cos, sin, sign=-1.0))  # the inverse rotation
        if dv is None:
            slots[2].zero_()
        else:
            slots[2].copy_(dv)
        return grad, None, None, None


class _SwiGLU(torch.autograd.Function):
    """silu(gate) * up; the backward writes d_gate and d_up into the halves of one tensor."""

    @staticmethod
    def forward(ctx, gate_up: Tensor) -> Tensor:
        gate, up = gate_up.chunk(2, dim=-1)  # [..., F] each
        act = F.silu(gate)
        ctx.save_for_backward(gate_up, act)
        return act * up

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        gate_up, act = ctx.saved_tensors
        gate, up = gate_up.chunk(2, dim=-1)
        out = torch.empty_like(gate_up)
        d_gate, d_up = out.chunk(2, dim=-1)
        torch.mul(grad, act, out=d_up)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=d_gate)
        return out


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, sign: float) -> Tensor:
    """x * cos + sign * rotate_half(x) * sin, rotate_half(x) = (-x2, x1) (Llama's), in a new
    contiguous tensor of the promoted dtype; sign -1 undoes sign 1 (cos, sin [B, 1, T, D]
    repeat their halves). Strided reads are two half-width copies, the arithmetic runs on
    whole contiguous rows (1.3-1.6x as fast as four half-width products, alone)."""
    half = x.shape[-1] // 2
    turned = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # rotate_half(x)
    torch.neg(x[..., half:], out=turned[..., :half])
    turned[..., half:].copy_(x[..., :half])
    dtype = torch.promote_types(x.dtype, cos.dtype)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    torch.mul(x, cos, out=out)
    return out.addcmul_(turned, sin, value=sign)


# The training step takes linear_cross_entropy (eager, CPU) from this many logits on: 32 MiB
# of float32, above which glibc maps every allocation fresh (page faults on each write). The
# step at the default config's 4096 x 4096 logits: 0.75x the time of F.cross_entropy; at
# 2048 x 1536 a tie; at 768 x 65 1.05x (bench figures: README, Benchmarks).
CE_CHUNKED_FROM = 2**23

# Rows per chunk of linear_cross_entropy: about 2^19 float32 logits (2 MiB, a core's L2),
# reused from the heap chunk after chunk; at least 64 rows, so each matmul stays efficient.
CE_CHUNK_ELEMENTS = 2**19


def linear_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    labels: Tensor,
    weights: Tensor | None = None,
    ignore_index: int = -100,
) -> tuple[Tensor, Tensor]:
    """The output head and the cross-entropy together, in chunks of rows.

    hidden [N, C], weight [V, C] (the head's), labels [N] (ignore_index: no target), weights
    [N] or None (1 per target) -> (sum over targets of weight * CE, differentiable in hidden
    and weight; [N] CE per row, 0 without a target, no gradient; float32, float64 for float64).

    Why: F.cross_entropy on whole logits writes four [N, V] float32 tensors a step (logits,
    log-probabilities, the zeroed gradient, its log-softmax backward), each freshly mapped
    memory (67 MB at 4096 x 4096: about a quarter of the default config's CPU step went to
    log_softmax and its backward). Here each chunk's logits are turned into their gradient in
    place while still in cache; the gradients of hidden and weight are taken in the forward
    and scaled by the incoming gradient in the backward. Matmuls run in autocast's dtype (or
    the weight's), softmax in float32, as F.linear + F.cross_entropy do under autocast.
    """
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(hidden, weight, labels, weights, ignore_index)
    objective, ce, _, _ = _head_and_ce(hidden, weight, labels, weights, ignore_index, False)
    return objective, ce


def _head_and_ce(hidden, weight, labels, weights, ignore_index: int, grads: bool):
    """(objective, ce [N], d objective / d hidden [N, C] or None, d / d weight [V, C] or None)."""
    N, V = hidden.shape[0], weight.shape[0]
    device = hidden.device
    dtype = matmul_dtype(weight)  # of the matmuls
    acc = torch.promote_types(dtype, torch.float32)  # of the softmax and the sums
    h, w = hidden.to(dtype), weight.to(dtype)  # [N, C], [V, C]; no-ops outside autocast
    valid = labels != ignore_index  # [N]
    target = torch.where(valid, labels, 0)[:, None]  # [N, 1]
    scale = valid.to(acc) if weights is None else torch.where(valid, weights.to(acc), 0.0)
    ce = torch.empty(N, dtype=acc, device=device)
    grad_h = torch.empty_like(hidden) if grads else None  # [N, C]
    grad_w = torch.zeros(weight.shape, dtype=acc, device=device) if grads else None
    rows = max(64, CE_CHUNK_ELEMENTS // V)
    for start in range(0, N, rows):
        s = slice(start, start + rows)
        logits = (h[s] @ w.t()).to(acc)  # [r, V]
        lse = torch.logsumexp(logits, dim=-1)  # [r]
        ce[s] = (lse - logits.gather(1, target[s]).squeeze(1)) * valid[s]
        if grads:  # d (scale * CE) / d logits = scale * (softmax - one_hot(target))
            probs = logits.sub_(lse[:, None]).exp_()  # [r, V], in place
            probs.scatter_add_(1, target[s], torch.full_like(lse[:, None], -1.0))
            g = probs.mul_(scale[s, None]).to(dtype)  # [r, V]
            grad_h[s] = g @ w  # [r, C]
            if dtype == acc:
                grad_w.addmm_(g.t(), h[s])  # [V, C]
            else:
                grad_w += (g.t() @ h[s]).to(acc)
    return (ce * scale).sum(), ce, grad_h, grad_w


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, weights, ignore_index):
        objective, ce, grad_h, grad_w = _head_and_ce(
            hidden, weight, labels, weights, ignore_index, True
        )
        ctx.save_for_backward(grad_h, grad_w)
        ctx.weight_dtype = weight.dtype
        ctx.mark_non_differentiable(ce)
        return objective, ce

    @staticmethod
    def backward(ctx, grad_objective: Tensor, _grad_ce: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        d_hidden = grad_h * grad_objective.to(grad_h.dtype) if ctx.needs_input_grad[0] else None
        d_weight = (
            (grad_w * grad_objective).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None
        )
        return d_hidden, d_weight, None, None, None
