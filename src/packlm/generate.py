"""`python -m packlm.generate ckpt_path=... 'prompt="..."'`: sample text from a checkpoint.

The checkpoint carries its own tokenizer (see packlm.callbacks.checkpoint_extras), so
nothing but the checkpoint file is needed.
"""

from __future__ import annotations

from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig

from packlm.callbacks.checkpoint_extras import tokenizer_from_checkpoint
from packlm.config import CONFIG_DIR
from packlm.model.lit_module import LitCausalLM
from packlm.sampling import sample_tokens


def generate(
    ckpt_path: str | Path,
    prompt: str = "",
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = 50,
    num_samples: int = 1,
    seed: int = 0,
    device: str = "cpu",
) -> list[str]:
    """Texts (prompt + continuation) sampled from the checkpoint's model."""
    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(f"ckpt_path={path}: no such checkpoint")
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    tokenizer = tokenizer_from_checkpoint(checkpoint)
    module = LitCausalLM.load_from_checkpoint(path, map_location=device, weights_only=True)
    module.eval()
    eos = (
        tokenizer.special_token_ids.get(tokenizer.special_tokens[0])
        if tokenizer.special_tokens
        else None
    )
    prompt_ids = tokenizer.encode_ordinary(prompt) or ([eos] if eos is not None else [])
    if not prompt_ids:
        raise ValueError("prompt: empty, and the tokenizer has no EOS to start from")
    texts = []
    for k in range(num_samples):
        new = sample_tokens(
            lambda ids: module(ids),
            prompt_ids,
            max_new_tokens,
            module.model_config.context_length,
            temperature=temperature,
            top_k=top_k,
            stop_id=eos,
            seed=seed + k,
            device=device,
        )
        texts.append(prompt + tokenizer.decode([i for i in new if i != eos]))
    return texts


@hydra.main(config_path=CONFIG_DIR, config_name="generate", version_base=None)
def main(cfg: DictConfig) -> None:
    texts = generate(
        cfg.ckpt_path, cfg.prompt, cfg.max_new_tokens, cfg.temperature, cfg.top_k,
        cfg.num_samples, cfg.seed, cfg.device,
    )  # fmt: skip
    print("\n\n---\n\n".join(texts))


if __name__ == "__main__":
    main()
