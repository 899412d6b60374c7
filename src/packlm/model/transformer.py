"""A small causal Transformer for packed batches: read it top to bottom.

Token embedding -> n_layer pre-norm blocks (RMSNorm, attention with rotary positions,
RMSNorm, SwiGLU MLP) -> RMSNorm -> output head (tied to the embedding if asked). Options of
the small-LM recipes (model.qk_norm, mlp=relu2, zero_init_proj, logit_softcap,
residual_scalars) are off unless asked; each is a per-token change, so packing stays exact.

Packing-aware in two places only: rotary angles come from `position_ids` (0 at each
document start), and attention uses the block-diagonal mask built from `segment_ids`
once per forward (masks.py). Together they make a packed row compute exactly what each
of its documents computes alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from packlm.config.model import ModelConfig
from packlm.model import fused, masks


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Rotary(nn.Module):
    """cos/sin of the rotary angles at each token's position, computed once per forward, each
    half of the head repeating the other's frequencies (Llama's `rotate_half` layout)."""

    def __init__(self, head_dim: int, base: float):
        super().__init__()
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [D/2]

    def forward(self, position_ids: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        angles = (
            position_ids[:, None, :, None].to(self.inv_freq.dtype) * self.inv_freq
        )  # [B, 1, T, D/2]
        angles = torch.cat((angles, angles), dim=-1)  # [B, 1, T, D]
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, H, T, D] turned by the rotary angles: pairs (i, i + D/2), Llama's rotate_half."""
    x1, x2 = x.chunk(2, dim=-1)  # [B, H, T, D/2] each
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin  # [B, H, T, D]


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.proj.residual = True  # scaled init, see Transformer._init_weights
        # model.qk_norm: one gain per head dimension for queries, one for keys
        self.q_norm = RMSNorm(config.head_dim) if config.qk_norm else None
        self.k_norm = RMSNorm(config.head_dim) if config.qk_norm else None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: masks.AttentionMask) -> Tensor:
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        # the heads in masks.attention_dtype (cos's), q and k rotated together
        qk, v = self.qkv(x).to(cos.dtype).split([2 * C, C], dim=-1)  # [B, T, 2C], [B, T, C]
        qk = qk.view(B, T, 2 * H, D)
        if self.q_norm is not None:  # per token and head, before the rotary turn
            q, k = qk.split(H, dim=2)  # [B, T, H, D] each
            q = F.rms_norm(q, (D,), self.q_norm.weight.to(q.dtype), self.q_norm.eps)
            k = F.rms_norm(k, (D,), self.k_norm.weight.to(k.dtype), self.k_norm.eps)
            qk = torch.cat((q, k), dim=2)  # [B, T, 2H, D]
        q, k = rotate(qk.transpose(1, 2), cos, sin).chunk(2, dim=1)  # [B, H, T, D] each
        y = masks.attend(q, k, v.view(B, T, H, D).transpose(1, 2), mask)  # [B, H, T, D]
        # [B, T, C] in the dtype proj's matmul takes (autocast's, else x's: bf16-true on CPU
        # attends in float32), merged and cast in one pass
        y = y.transpose(1, 2).to(fused.matmul_dtype(x), memory_format=torch.contiguous_format)
        return self.proj(y.reshape(B, T, C))  # a view, or the copy when no cast was needed


class SwiGLU(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        hidden = config.mlp_hidden
        self.gate_up = nn.Linear(config.n_embd, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, config.n_embd, bias=False)
        self.down.residual = True

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # [B, T, hidden] each
        return self.down(F.silu(gate) * up)  # [B, T, C]


class ReLU2(nn.Module):
    """model.mlp=relu2: down(relu(up x)^2), nanochat's MLP (hidden width: config.mlp_hidden)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.up = nn.Linear(config.n_embd, config.mlp_hidden, bias=False)
        self.down = nn.Linear(config.mlp_hidden, config.n_embd, bias=False)
        self.down.residual = True

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.relu(self.up(x)).square())  # [B, T, C]


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm1 = RMSNorm(config.n_embd)
        self.attn = Attention(config)
        self.norm2 = RMSNorm(config.n_embd)
        self.mlp = SwiGLU(config) if config.mlp == "swiglu" else ReLU2(config)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: masks.AttentionMask) -> Tensor:
        x = x + self.drop(self.attn(self.norm1(x), cos, sin, mask))
        x = x + self.drop(self.mlp(self.norm2(x)))
        return x


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config.validate()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.rotary = Rotary(config.head_dim, config.rope_base)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm_f = RMSNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        if config.residual_scalars:  # x = resid[i] * x + x0[i] * embedding before block i
            self.resid_scalars = nn.Parameter(torch.ones(config.n_layer))
            self.x0_scalars = nn.Parameter(torch.zeros(config.n_layer))
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """nanoGPT/GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer)
        so the residual stream's variance does not grow with depth (model.zero_init_proj:
        zero, so each block starts as the identity). The same random draws either way."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            std = 0.02
            if getattr(module, "residual", False):
                std /= math.sqrt(2 * self.config.n_layer)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "residual", False) and self.config.zero_init_proj:
                nn.init.zeros_(module.weight)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights counted once

    def forward(
        self,
        input_ids: Tensor,
        segment_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """input_ids [B, T] -> logits [B, T, V].

        segment_ids [B, T]: document index inside the row, -1 for PAD; None means one
        document per row. position_ids [B, T]: None derives them from segment_ids (0 at
        each document start).
        """
        logits = self.lm_head(self.hidden(input_ids, segment_ids, position_ids))  # [B, T, V]
        cap = self.config.logit_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)

    def hidden(
        self,
        input_ids: Tensor,
        segment_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """input_ids [B, T] -> the final normed hidden states [B, T, C] the head reads (the
        training loss applies the head itself, in row chunks: fused.linear_cross_entropy)."""
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = positions_from_segments(segment_ids, B, T, input_ids.device)
        x = self.drop(self.wte(input_ids))  # [B, T, C]
        dtype = masks.attention_dtype(x)  # mask and rotary tables are built in it
        backend = masks.resolve_backend(self.config.attention, x.device, T)
        mask = masks.build_mask(segment_ids, backend, dtype, T, x.device)  # once for all layers
        cos, sin = self.rotary(position_ids, dtype)  # [B, 1, T, D] each
        x0 = x
        for i, block in enumerate(self.blocks):
            if self.config.residual_scalars:
                x = self.resid_scalars[i] * x + self.x0_scalars[i] * x0
            x = block(x, cos, sin, mask)  # [B, T, C]
        return self.norm_f(x)  # [B, T, C]


def positions_from_segments(segment_ids: Tensor | None, B: int, T: int, device) -> Tensor:
    """[B, T] positions: 0 at the row start and wherever the segment id changes, +1 per token."""
    t = torch.arange(T, device=device).expand(B, T)  # [B, T]
    if segment_ids is None:
        return t
    starts = torch.ones(B, T, dtype=torch.bool, device=device)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]  # [B, T]
    last_start = torch.where(starts, t, 0).cummax(dim=1).values  # [B, T]
    return t - last_start
