"""Builders shared by the export tests: texts, a tiny checkpoint shaped like train.py's."""

from __future__ import annotations

import torch

from packlm.checkpoint.contents import KEY
from packlm.model.lit_module import LitCausalLM

SPECIALS = ["<|endoftext|>", "<|pad|>"]
TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def main(argv):\n    return sum(int(a) for a in argv)\n",
    "Grüße aus München, naïve café, 你好世界, emoji 🙂🚀.",
]


def write_checkpoint(path, tokenizer, seed: int = 0, **model) -> LitCausalLM:
    """A LitCausalLM with random, large-ish weights (so logits differ from token to token)
    saved the way train.py's checkpoints are: state_dict, hyper_parameters, packlm extras."""
    torch.manual_seed(seed)
    base = dict(vocab_size=tokenizer.vocab_size, context_length=32, n_layer=1, n_head=2, n_embd=32)
    config = {**base, **model}
    module = LitCausalLM(model=config)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.3 * torch.randn_like(p))
    data = {"window": 16, "packing": "document", "text_field": "text"}
    ckpt = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        KEY: {"tokenizer": tokenizer.__getstate__(), "data": data},
    }
    torch.save(ckpt, path)
    return module.eval()
