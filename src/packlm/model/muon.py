"""Muon for the hidden matrices, AdamW for the rest: one optimizer Lightning drives (optim=muon).

Muon (Keller Jordan, https://kellerjordan.github.io/posts/muon/) is SGD with Nesterov
momentum whose update matrix is replaced by an approximate orthogonalization (U V^T of its
SVD, from a few Newton-Schulz steps of a quintic), so every direction of a weight moves by
about the same amount. It is for 2-D hidden weights only: modded-nanogpt and nanochat train
the token embedding, the output head and the vectors (norm gains, scalars) with AdamW.

`MuonAdamW` holds both kinds of param group (a group with `muon=True` is Muon's) over one
`state` and one `param_groups` list, so Lightning sees one optimizer: automatic
optimization, gradient accumulation, clipping, DDP (every rank orthogonalizes the same
all-reduced gradient) and the lr schedule (LambdaLR scales every group) work unchanged, and
`state_dict` / `load_state_dict` are the base class's, so a resume is exact.

Newton-Schulz precision: `torch.optim.Muon` iterates in bfloat16, native on CUDA and on
CPUs with bf16 units (avx512_bf16, AMX), emulated and about 10x slower elsewhere (36 steps
of the Shakespeare preset's minute against AdamW's 459 on an AVX2 EPYC, issue 61). There
`muon_update` runs the same step with the iteration in float32; with bfloat16 it is the
same step as torch.optim.Muon, bit for bit (tests/model/test_muon.py).

Learning rate: Keller Jordan's and nanochat's rule, lr 0.02 scaled by
sqrt(max(1, rows / cols)) (torch.optim.Muon's adjust_lr_fn="original"). torch.optim.Muon's
default lr is 1e-3 with that same rule; its "match_rms_adamw" (Moonshot's
0.2 * sqrt(max(rows, cols)), to reuse AdamW's lr) is not used: the recipes this follows
were tuned with the original rule, and one rule keeps optim.muon_lr comparable to them.
Weight decay is decoupled and scaled by the lr (p *= 1 - lr * wd), as torch.optim.Muon's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
"""Keller Jordan's quintic (a, b, c): the largest slope at 0 that still keeps every singular
value near 1 (about 0.7-1.2 after 5 steps), not exactly 1."""
NS_EPS = 1e-7


def newton_schulz(
    g: Tensor, steps: int, dtype: torch.dtype = torch.float32, eps: float = NS_EPS
) -> Tensor:
    """g [A, B] -> about U V^T of its SVD, [A, B] in `dtype`: X <- a X + (b X X^T + c (X X^T)^2) X
    after scaling X to Frobenius norm 1 (so its spectral norm is at most 1). Iterates on the
    wide orientation, so the Gram matrix is [min(A, B), min(A, B)]."""
    a, b, c = NS_COEFFICIENTS
    tall = g.size(0) > g.size(1)
    x = g.to(dtype)
    x = x.T if tall else x  # [min, max]
    x = x / x.norm().clamp(min=eps)  # a new tensor: g is never written
    for _ in range(steps):
        gram = x @ x.T  # [min, min]
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b G + c G^2
        x = torch.addmm(x, poly, x, beta=a)  # a X + (b G + c G^2) X
    return x.T if tall else x


def lr_scale(shape: torch.Size) -> float:
    """Keller Jordan's sqrt(max(1, rows / cols)) (torch.optim.Muon's adjust_lr_fn="original"):
    an orthogonal [rows, cols] update with rows > cols has a smaller RMS per entry."""
    return max(1.0, shape[0] / shape[1]) ** 0.5


@torch.no_grad()
def muon_update(
    params: list[Tensor],
    buffers: list[Tensor],
    *,
    lr: float,
    weight_decay: float,
    momentum: float,
    nesterov: bool,
    ns_steps: int,
    dtype: torch.dtype,
) -> None:
    """One Muon step of `params` (their .grad) with momentum `buffers`, in the order of
    torch.optim.Muon's own step (its dtype is bfloat16)."""
    for p, buf in zip(params, buffers, strict=True):
        grad = p.grad  # [A, B]
        buf.lerp_(grad, 1 - momentum)
        update = grad.lerp(buf, momentum) if nesterov else buf
        update = newton_schulz(update, ns_steps, dtype)
        p.mul_(1 - lr * weight_decay)
        p.add_(update, alpha=-lr * lr_scale(p.shape))


def bf16_native(device: torch.device) -> bool:
    """Whether bfloat16 matmuls run on hardware units here: CUDA, or a CPU that lists
    avx512_bf16 or amx_bf16 (Linux's /proc/cpuinfo; other systems: assumed not)."""
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def momentum_at(step: int, start: float, end: float, warmup_steps: int) -> float:
    """Muon's momentum at optimizer step `step` (0-based): linear from start to end over
    warmup_steps (nanochat: 0.85 -> 0.95 over 300), then end."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return end
    return start + (end - start) * step / warmup_steps


class MuonAdamW(torch.optim.Optimizer):
    """Muon on the groups marked `muon=True`, AdamW (torch's, fused where asked) on the rest.

    Each Muon group counts its steps in `group["muon_steps"]` (saved with the groups), from
    which the momentum warmup is computed, so a resume continues it exactly. Momentum,
    Nesterov and the Newton-Schulz steps come from the constructor on every step, so a resume
    applies the current config's. ns_dtype: bfloat16 steps with torch.optim.Muon itself,
    float32 with `muon_update`."""

    def __init__(
        self,
        groups: Iterable[dict[str, Any]],
        *,
        betas: tuple[float, float],
        eps: float,
        fused: bool | None = None,
        momentum: float = 0.95,
        momentum_start: float = 0.85,
        momentum_warmup_steps: int = 300,
        nesterov: bool = True,
        ns_steps: int = 5,
        ns_dtype: torch.dtype = torch.float32,
    ):
        groups = [dict(g, muon=bool(g.get("muon", False))) for g in groups]
        for g in groups:
            if g["muon"]:
                g.update(muon_steps=0, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps)
                g.update(ns_coefficients=NS_COEFFICIENTS, eps=NS_EPS, adjust_lr_fn="original")
                bad = [tuple(p.shape) for p in g["params"] if p.dim() != 2]
                if bad:
                    raise ValueError(f"Muon trains 2-D matrices only, got shapes {bad}")
        super().__init__(groups, defaults={})
        self.momentum = (momentum_start, momentum, momentum_warmup_steps)
        self.nesterov, self.ns_steps, self.ns_dtype = nesterov, ns_steps, ns_dtype
        adamw_groups = [g for g in self.param_groups if not g["muon"]]
        # the same group dicts and state: the inner optimizers only add their defaults
        self._adamw = torch.optim.AdamW(adamw_groups, betas=betas, eps=eps, fused=fused)
        muon_groups = [g for g in self.param_groups if g["muon"]]
        self._native: torch.optim.Muon | None = None
        if ns_dtype == torch.bfloat16 and muon_groups:
            self._native = torch.optim.Muon(muon_groups)
        self._link()

    def _link(self) -> None:
        """Point the inner optimizers at this one's groups and state (after a load too)."""
        self._adamw.param_groups = [g for g in self.param_groups if not g["muon"]]
        self._adamw.state = self.state
        if self._native is not None:
            self._native.param_groups = [g for g in self.param_groups if g["muon"]]
            self._native.state = self.state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # new group dicts and state
        self._link()

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._adamw.step()
        for group in self.param_groups:
            if group["muon"]:
                group["momentum"] = momentum_at(group["muon_steps"], *self.momentum)
                group.update(nesterov=self.nesterov, ns_steps=self.ns_steps, eps=NS_EPS)
                group["muon_steps"] += 1
        if self._native is not None:
            self._native.step()
            return loss
        for group in self.param_groups:
            if not group["muon"]:
                continue
            params = [p for p in group["params"] if p.grad is not None]
            buffers = []
            for p in params:
                state = self.state[p]
                if "momentum_buffer" not in state:  # torch.optim.Muon's name: checkpoints agree
                    state["momentum_buffer"] = torch.zeros_like(p)
                buffers.append(state["momentum_buffer"])
            muon_update(
                params,
                buffers,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                momentum=group["momentum"],
                nesterov=group["nesterov"],
                ns_steps=group["ns_steps"],
                dtype=self.ns_dtype,
            )
        return loss
