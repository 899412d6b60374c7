"""The output head and the cross-entropy fused in row chunks (`linear_cross_entropy`), the
one hand-written autograd Function of the model, and `matmul_dtype`.

It stays because it is worth a tenth of the default config's eager CPU step (bench/fused.py:
the step 1.14-1.15x as long with logits + F.cross_entropy, float32, AMD EPYC). The hand-written
RMSNorm, q/k/v heads with rotary and SwiGLU Functions that stood here are gone for torch's own
ops (transformer.py): each was worth under 4% of the step at the default config's and the
Shakespeare preset's shapes (bench/fused.py, float32; bf16-mixed alike), below the 10% that
would pay for a hand-written backward. tests/model/test_fused.py checks values and gradients.
"""

from __future__ import annotations

import torch
from torch import Tensor


def matmul_dtype(x: Tensor) -> torch.dtype:
    """The dtype a matmul taking x runs in: autocast's where it is on for x's device, else x's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


# The training step takes linear_cross_entropy (eager, CPU) from this many logits on: 32 MiB
# of float32, above which glibc maps every allocation fresh (page faults on each write). The
# whole step at the default config's 4096 x 4096 logits: 0.87x the time of logits +
# F.cross_entropy (bench/fused.py, glibc's defaults); the loss alone 0.75x, at 2048 x 1536 a
# tie, at 768 x 65 1.05x (bench/model.py, train.keep_freed_memory's thresholds; README).
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
    softcap: float | None = None,
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
    softcap (model.logit_softcap): the logits are softcap * tanh(logits / softcap).
    """
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(hidden, weight, labels, weights, ignore_index, softcap)
    objective, ce, _, _ = _head_and_ce(
        hidden, weight, labels, weights, ignore_index, False, softcap
    )
    return objective, ce


def _head_and_ce(hidden, weight, labels, weights, ignore_index: int, grads: bool, softcap=None):
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
        if softcap is not None:
            capped = torch.tanh(logits / softcap)  # [r, V]; its derivative is 1 - capped^2
            logits = capped * softcap
        lse = torch.logsumexp(logits, dim=-1)  # [r]
        ce[s] = (lse - logits.gather(1, target[s]).squeeze(1)) * valid[s]
        if grads:  # d (scale * CE) / d logits = scale * (softmax - one_hot(target))
            probs = logits.sub_(lse[:, None]).exp_()  # [r, V], in place
            probs.scatter_add_(1, target[s], torch.full_like(lse[:, None], -1.0))
            if softcap is not None:  # through the cap: d logits / d (h w^T) = 1 - tanh^2
                probs.mul_(capped.square_().neg_().add_(1.0))
            g = probs.mul_(scale[s, None]).to(dtype)  # [r, V]
            grad_h[s] = g @ w  # [r, C]
            if dtype == acc:
                grad_w.addmm_(g.t(), h[s])  # [V, C]
            else:
                grad_w += (g.t() @ h[s]).to(acc)
    return (ce * scale).sum(), ce, grad_h, grad_w


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, weights, ignore_index, softcap):
        objective, ce, grad_h, grad_w = _head_and_ce(
            hidden, weight, labels, weights, ignore_index, True, softcap
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
        return d_hidden, d_weight, None, None, None, None
