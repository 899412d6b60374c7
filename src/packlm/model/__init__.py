"""The model half: batch -> logits -> loss + counts.

1. `packlm.config.model`: the `model` and `optim` config groups.
2. `masks.py`: segment ids -> the block-diagonal causal mask (SDPA, or two batched matmuls
   for short CPU rows) or BlockMask (Flex); the dtype attention runs in (float32 on CPU,
   even under bf16 autocast).
3. `fused.py`: the output head with the cross-entropy in row chunks, one autograd Function
   (no [B, T, V] logits in the eager CPU training step), and `matmul_dtype`.
4. `transformer.py`: `Transformer`, a plain nn.Module (RMSNorm, RoPE from position_ids,
   SwiGLU, tied head): a packed row gives the same logits as each document alone.
5. `loss.py`: sum of CE over supervised targets / N of the whole optimizer step (through
   the chunked head for large CPU logits), the `StepTotals` of a step, the gradient rescale
   that makes it exact.
6. `schedule.py`: the lr multiplier (warmup, then a cosine) and its clocks: steps, supervised
   tokens (data.curriculum), the share of trainer.max_time (optim.anneal_by_time).
7. `lit_module.py`: `LitCausalLM` = forward, loss, AdamW on that schedule.
8. `sampling.py`: text generation from a model (temperature, top-k).

`Transformer` and `LitCausalLM` are imported on first use, so the configs (what composing a
config needs, e.g. `python -m packlm.prepare`) import neither torch nor Lightning.
"""

from packlm.config.model import ModelConfig, OptimConfig

__all__ = ["LitCausalLM", "ModelConfig", "OptimConfig", "Transformer"]


def __getattr__(name: str):
    if name == "Transformer":
        from packlm.model.transformer import Transformer

        return Transformer
    if name == "LitCausalLM":
        from packlm.model.lit_module import LitCausalLM

        return LitCausalLM
    raise AttributeError(f"module 'packlm.model' has no attribute {name!r}")
