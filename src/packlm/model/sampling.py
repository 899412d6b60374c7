"""Autoregressive sampling from a causal LM: temperature, top-k, context cropping.

No KV cache: the models packlm trains are small and sampling is for looking at what a
run learned (TensorBoard text samples, `python -m packlm.generate`), not for serving.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


@torch.no_grad()
def sample_tokens(
    logits_fn: Callable[[Tensor], Tensor],
    prompt_ids: list[int],
    max_new_tokens: int,
    context_length: int,
    temperature: float = 1.0,
    top_k: int | None = 50,
    stop_id: int | None = None,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> list[int]:
    """Sample up to `max_new_tokens` ids after `prompt_ids`; stop early at `stop_id`.

    `logits_fn` maps input ids [1, T] to logits [1, T, V]. temperature 0 is greedy.
    """
    if temperature < 0:
        raise ValueError(f"temperature={temperature}: must be >= 0")
    if top_k is not None and top_k <= 0:
        raise ValueError(f"top_k={top_k}: must be a positive integer or null")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    # only the last C ids are ever read: a long prompt or run costs no copy of its whole length
    context = torch.tensor([prompt_ids[-context_length:]], dtype=torch.long, device=device)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = logits_fn(context)[0, -1].float().cpu()  # [V]
        if temperature == 0:
            next_id = int(logits.argmax())
        else:  # in float64, the largest logit 0: a tiny temperature gives -inf, never NaN
            logits = (logits.double() - logits.max()) / temperature
            if top_k is not None and top_k < logits.numel():
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            next_id = int(torch.multinomial(probs, 1, generator=generator))
        new.append(next_id)
        if stop_id is not None and next_id == stop_id:
            break
        next_ids = torch.tensor([[next_id]], device=context.device)
        context = torch.cat([context, next_ids], dim=1)[:, -context_length:]  # [1, <=C]
    return new


def sample_text(
    logits_fn: Callable[[Tensor], Tensor],
    tokenizer,
    prompt: str,
    max_new_tokens: int,
    context_length: int,
    temperature: float = 0.8,
    top_k: int | None = 50,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> str:
    """prompt + a sampled continuation, stopping at EOS (the first special token)."""
    eos = (
        tokenizer.special_token_ids[tokenizer.special_tokens[0]]
        if tokenizer.special_tokens
        else None
    )
    prompt_ids = tokenizer.encode_ordinary(prompt) or ([eos] if eos is not None else [])
    if not prompt_ids:
        raise ValueError("prompt: empty, and the tokenizer has no EOS to start from")
    new = sample_tokens(
        logits_fn, prompt_ids, max_new_tokens, context_length,
        temperature=temperature, top_k=top_k, stop_id=eos, seed=seed, device=device,
    )  # fmt: skip
    return prompt + tokenizer.decode([i for i in new if i != eos])


def sample_reply(
    logits_fn: Callable[[Tensor], Tensor],
    tokenizer,
    turns: list[tuple[str, str]],
    max_new_tokens: int,
    context_length: int,
    temperature: float = 0.8,
    top_k: int | None = 50,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> tuple[str, bool]:
    """(the assistant's answer to the conversation `turns`, did it end with `<|im_end|>`):
    the prompt is rendered as training renders conversations (`ChatFormat`), then
    `<|im_start|>assistant\\n`; sampling stops at the end-of-turn token, which is not part of
    the answer. A tokenizer without the chat tokens raises ChatTokenError."""
    from packlm.tokenizer.chat import ChatFormat

    chat = ChatFormat.of(tokenizer)
    prompt_ids = chat.generation_prompt(turns, tokenizer.encode_ordinary)
    new = sample_tokens(
        logits_fn, prompt_ids, max_new_tokens, context_length,
        temperature=temperature, top_k=top_k, stop_id=chat.end_id, seed=seed, device=device,
    )  # fmt: skip
    ended = bool(new) and new[-1] == chat.end_id
    return tokenizer.decode(new[:-1] if ended else new), ended
