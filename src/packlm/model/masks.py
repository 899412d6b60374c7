"""segment_ids -> the block-diagonal causal attention of a packed batch, built once per batch.

allowed(i, j) = j <= i and seg[i] == seg[j] >= 0, and a PAD query (seg -1) attends to
itself only, so no row of the mask is empty and softmax never sees an all -inf row.
The trick used throughout: give every PAD position its own negative document id
(-1 - t), then "same document and causal" is the whole rule.

Three forms, one meaning:
- stream rows (one segment per row, no PAD): no mask at all, SDPA with is_causal=True;
- dense: an additive float mask [B, 1, T, T] for SDPA (0 allowed, -inf masked);
- flex: a FlexAttention BlockMask (CUDA), which skips the blocks no query may see.
On CPU, rows of up to MATMUL_MAX_T tokens attend through two batched matmuls and a softmax
(the "matmul" backend, with the dense mask or a causal one) instead of SDPA's flash kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from packlm.model import fused

try:  # FlexAttention: torch >= 2.5
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError:  # pragma: no cover - old torch
    BlockMask = create_block_mask = flex_attention = None  # type: ignore[assignment,misc]


def document_ids(segment_ids: Tensor) -> Tensor:
    """[B, T] segment ids -> [B, T] ids where each PAD position is a one-token document."""
    T = segment_ids.shape[-1]
    singletons = -1 - torch.arange(T, device=segment_ids.device, dtype=segment_ids.dtype)  # [T]
    return torch.where(segment_ids >= 0, segment_ids, singletons)  # [B, T]


def allowed(segment_ids: Tensor) -> Tensor:
    """[B, T] -> bool [B, T, T]: may query i (dim 1) attend to key j (dim 2)."""
    T = segment_ids.shape[-1]
    doc = document_ids(segment_ids)  # [B, T]
    causal = torch.ones(T, T, dtype=torch.bool, device=doc.device).tril()  # [T, T]
    return causal & (doc[:, :, None] == doc[:, None, :])  # [B, T, T]


def additive_mask(segment_ids: Tensor, dtype: torch.dtype) -> Tensor:
    """[B, T] -> [B, 1, T, T] float mask (0 where allowed, -inf elsewhere) for SDPA.

    SDPA turns a bool mask into this float form inside every call, i.e. once per layer;
    handing it the float mask built once per batch saves that (see bench/model.py).
    """
    ok = allowed(segment_ids)[:, None]  # [B, 1, T, T]
    zero = torch.zeros((), dtype=dtype, device=ok.device)
    return zero.masked_fill(~ok, float("-inf"))  # [B, 1, T, T]


def is_stream(segment_ids: Tensor | None) -> bool:
    """Plain causal attention is exact: no segment_ids, or all ids 0 (one document, no PAD).

    Only checked for CPU tensors: on an accelerator the answer would have to be read back,
    stalling the host on every forward. LitCausalLM checks each batch on the CPU before it
    is moved and passes segment_ids=None for stream batches. Under torch.compile the check
    is skipped too (the dense mask is exact for stream rows as well): reading a value would
    break the compiled graph in two on every forward.
    """
    if segment_ids is None:
        return True
    if torch.compiler.is_compiling() or segment_ids.device.type != "cpu":
        return False
    return not bool((segment_ids != 0).any())


def flex_block_mask(segment_ids: Tensor) -> BlockMask:
    """[B, T] -> a FlexAttention BlockMask of the same rule, shared by all heads and layers."""
    if create_block_mask is None:  # pragma: no cover
        raise RuntimeError("model.attention=flex needs torch >= 2.5 (FlexAttention)")
    B, T = segment_ids.shape
    doc = document_ids(segment_ids)  # [B, T]

    def same_document_causal(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (doc[b, q_idx] == doc[b, kv_idx])

    return create_block_mask(same_document_causal, B, None, T, T, device=segment_ids.device)


@dataclass
class AttentionMask:
    """What every layer needs to attend; exactly one kind of mask is set."""

    is_causal: bool = False
    dense: Tensor | None = None  # [B, 1, T, T] additive, for SDPA; matmul: or causal [T, T]
    block: BlockMask | None = None  # for FlexAttention
    matmul: bool = False  # attend with batched matmuls (matmul_attention), not SDPA


# CPU rows up to this many tokens attend by matmul. Attention alone, forward + backward at
# [12, 4, T, 32] in float32, takes 0.6x the time of SDPA's flash kernel at T=64, the same at
# T=128 and 1.1-1.4x at T=256 (bench/model.py's attention rows time the whole model).
MATMUL_MAX_T = 64

# The same under torch.set_float32_matmul_precision("medium") (float32 matmuls in bf16, fast
# where oneDNN has bf16 units), which slows SDPA's CPU flash kernel to about 11 ms a forward +
# backward whatever the size (torch 2.13, [B, 6, T, 32], document masks): 9.9x matmul
# attention's time at T=64, 2.8x at 256, 1.2x at 512, 0.5x at 768 (bench/model.py).
MATMUL_MAX_T_MEDIUM = 512


def resolve_backend(attention: str, device: torch.device, T: int | None = None) -> str:
    """auto -> flex on CUDA (compiled kernels exist there); on CPU matmul for rows of at most
    MATMUL_MAX_T tokens (MATMUL_MAX_T_MEDIUM under float32 matmul precision "medium"), sdpa
    for longer ones (and elsewhere)."""
    if attention == "auto":
        if device.type == "cuda" and flex_attention is not None:
            return "flex"
        medium = (  # read in eager only: a compiled graph would break on it
            not torch.compiler.is_compiling() and torch.get_float32_matmul_precision() == "medium"
        )
        limit = MATMUL_MAX_T_MEDIUM if medium else MATMUL_MAX_T
        if device.type == "cpu" and T is not None and limit >= T:  # rows of at most `limit`
            return "matmul"
        return "sdpa"
    return attention


def build_mask(
    segment_ids: Tensor | None, backend: str, dtype: torch.dtype, T: int | None = None, device=None
) -> AttentionMask:
    """The mask of one batch, built once and reused by every layer. T and device: the rows'
    (needed without segment_ids on the matmul backend)."""
    matmul = backend == "matmul"
    if is_stream(segment_ids):
        if matmul:  # the causal rule as an additive [T, T], broadcast over rows and heads
            if segment_ids is not None:
                T, device = segment_ids.shape[-1], segment_ids.device
            return AttentionMask(dense=causal_bias(T, dtype, device), matmul=True)
        return AttentionMask(is_causal=True)
    if backend == "flex":
        return AttentionMask(block=flex_block_mask(segment_ids))
    return AttentionMask(dense=additive_mask(segment_ids, dtype), matmul=matmul)


_compiled_flex = None


def _flex(q: Tensor) -> object:
    """Compiled flex_attention on CUDA (fused kernel); eager reference elsewhere."""
    global _compiled_flex
    if q.device.type != "cuda" or torch.compiler.is_compiling():  # inside model.compile: traced
        return flex_attention
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention)
    return _compiled_flex


def attention_dtype(x: Tensor) -> torch.dtype:
    """The dtype attention (and rotary) runs in: autocast's or x's, but float32 on CPU.

    CPU's flash attention runs its backward about 5x slower in bf16 than in float32 at
    these sizes, and 16-bit elementwise work is slower there too (bench/model.py), while
    the matmuls around it keep the low precision.
    """
    dtype = fused.matmul_dtype(x)
    if x.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return dtype


def attend(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask) -> Tensor:
    """q, k, v [B, H, T, D] -> [B, H, T, D] under `mask`, in q's dtype (autocast off)."""
    with torch.autocast(q.device.type, enabled=False):
        if mask.block is not None:
            return _flex(q)(q, k, v, block_mask=mask.block)
        dense = None if mask.dense is None else mask.dense.to(q.dtype)  # no-op: built in it
        if mask.matmul:
            return matmul_attention(q, k, v, dense)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=dense, is_causal=mask.is_causal)


def causal_bias(T: int, dtype: torch.dtype, device) -> Tensor:
    """[T, T] additive causal mask: 0 on and below the diagonal, -inf above."""
    return torch.full((T, T), float("-inf"), dtype=dtype, device=device).triu(1)


def matmul_attention(q: Tensor, k: Tensor, v: Tensor, dense: Tensor | None) -> Tensor:
    """softmax(q k^T / sqrt(D) + mask) v as two batched matmuls; dense None: causal. What
    SDPA computes, but the [B, H, T, T] probabilities are held for the backward (4 bytes each
    in float32: 96 KiB per row of T = 64 with 6 heads, per layer; 4 MiB at T = 512 with 8),
    which is why auto takes it for short rows only."""
    T, D = q.shape[-2:]
    if dense is None:  # [T, T], broadcast over rows and heads
        dense = causal_bias(T, q.dtype, q.device)
    scores = torch.add(dense, q @ k.transpose(-1, -2), alpha=D**-0.5)  # [B, H, T, T]
    if scores.dtype in (torch.float16, torch.bfloat16):  # softmax in float32, like SDPA's
        probs = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype)
    else:
        probs = scores.softmax(dim=-1)
    return probs @ v  # [B, H, T, D]
