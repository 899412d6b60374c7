"""Where packlm's block spends more than nanoGPT's: each part alone, forward + backward.

    python bench/block_parts.py [--repeats 7]

At nanoGPT's CPU shape (B=12, T=64, C=128, 4 heads, SwiGLU hidden 352), one thread, each
part timed in this process's CPU time (other jobs on a shared machine do not count), the
parts taking turns; medians over repeats of 30 calls. Pairs: RMSNorm (F.rms_norm) against
LayerNorm, SwiGLU's activation (gate and up from one matmul) against GELU on the 4x hidden,
and attention from the q/k/v projection to the merged heads: packlm's (rotary on q and k,
then the matmul path `model.attention=auto` takes at T <= 64, or SDPA; causal and with a
document mask) against nanoGPT's (no rotary, is_causal SDPA). The matmuls of the linear
layers are the same work in both models and are left out.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from packlm.model import masks
from packlm.model.transformer import rotate

B, T, H, D, HIDDEN = 12, 64, 4, 32, 352
C = H * D


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(B, T, C, requires_grad=True)
    w = torch.ones(C, requires_grad=True)
    qkv = torch.randn(B, T, 3 * C, requires_grad=True)
    gate_up = torch.randn(B, T, 2 * HIDDEN, requires_grad=True)
    fc = torch.randn(B, T, 4 * C, requires_grad=True)
    theta = torch.rand(1, 1, T, D // 2) * 6.3
    cos, sin = torch.cat((theta, theta), -1).cos(), torch.cat((theta, theta), -1).sin()
    seg = torch.zeros(B, T, dtype=torch.int32)
    seg[:, 20:] += 1
    seg[:, 45:] += 1  # three documents a row

    def nanogpt_attention():
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in qkv.split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, D]
        return y.transpose(1, 2).reshape(B, T, C)

    def packlm_attention(backend: str, segments):
        mask = masks.build_mask(segments, backend, torch.float32, T, x.device)
        qk, v = qkv.split([2 * C, C], dim=-1)
        q, k = rotate(qk.view(B, T, 2 * H, D).transpose(1, 2), cos, sin).chunk(2, dim=1)
        y = masks.attend(q, k, v.view(B, T, H, D).transpose(1, 2), mask)  # [B, H, T, D]
        return y.transpose(1, 2).reshape(B, T, C)

    def swiglu():
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    parts = {
        "LayerNorm (nanoGPT)": lambda: F.layer_norm(x, (C,)),
        "RMSNorm (packlm)": lambda: F.rms_norm(x, (C,), w, 1e-6),
        "GELU on 4C (nanoGPT)": lambda: F.gelu(fc),
        "SwiGLU activation (packlm)": swiglu,
        "attention, is_causal SDPA (nanoGPT)": nanogpt_attention,
        "attention + rotary, matmul, stream": lambda: packlm_attention("matmul", None),
        "attention + rotary, matmul, documents": lambda: packlm_attention("matmul", seg),
        "attention + rotary, SDPA, stream": lambda: packlm_attention("sdpa", None),
        "attention + rotary, SDPA, documents": lambda: packlm_attention("sdpa", seg),
    }
    ms: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(args.repeats):
        for name, part in parts.items():
            start = time.process_time()
            for _ in range(30):
                y = part()
                y.backward(torch.ones_like(y))
            ms[name].append((time.process_time() - start) / 30 * 1e3)
    print(f"B={B} T={T} C={C} H={H}, 1 thread, CPU ms per forward + backward (median)\n")
    for name, values in ms.items():
        print(f"  {name:<40} {statistics.median(values):6.3f}")


if __name__ == "__main__":
    main()
