"""Train a Hugging Face causal LM on packlm's packed batches, documents isolated, with the
exact token-weighted loss of the optimizer step, in plain Lightning.

    pip install 'packlm[hf]'
    python examples/hf_causal_lm.py                     # tiny random Llama, tiny corpus
    python examples/hf_causal_lm.py --arch gpt2 --mask 4d --steps 50 --sources 'docs/*.txt'

Nothing is downloaded: the model is built from a config in code (randomly initialised);
the corpus is written here unless --sources names one. `HFLightning` is the whole adapter:
packlm's batch goes in through `packlm.model.hf.hf_inputs`, its labels go to
`ExactStepLoss.step_loss`, never to the model's own `labels=` (they are already shifted).
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

import lightning as L
import torch

from packlm.data import PackedDataModule
from packlm.model.hf import hf_inputs
from packlm.model.step_loss import ExactStepLoss


class HFLightning(ExactStepLoss, L.LightningModule):
    """Any Hugging Face causal LM (`model(**hf_inputs(batch)).logits` [B, T, V])."""

    def __init__(self, model: torch.nn.Module, mask: str = "position_ids", lr: float = 1e-3):
        super().__init__()
        self.model, self.mask, self.lr = model, mask, lr

    def forward(self, batch):
        return self.model(**hf_inputs(batch, self.mask, self.model.dtype)).logits

    def training_step(self, batch, batch_idx):
        return self.step_loss(batch, self(batch))  # sum CE / N of the whole optimizer step

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.lr)


def tiny_model(arch: str, vocab_size: int, context: int, attention: str = "sdpa"):
    """A randomly initialised Llama or GPT-2 of about 100k parameters (no download)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    if arch == "llama":
        config = LlamaConfig(
            vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
            attn_implementation=attention,
        )  # fmt: skip
        return LlamaForCausalLM(config)
    config = GPT2Config(
        vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4, n_positions=context,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
        attn_implementation=attention,
    )  # fmt: skip
    return GPT2LMHeadModel(config)


def write_corpus(root: Path, n: int = 80, seed: int = 0) -> Path:
    """n short pseudo-English documents, one file each."""
    words = "the of and to a in that is was he for it with as his on be at by had not"
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        text = " ".join(rng.choice(words.split()) for _ in range(rng.randint(5, 80)))
        (root / f"doc{i:03d}.txt").write_text(text + ".\n", encoding="utf-8")
    return root


def main(argv: list[str] | None = None) -> HFLightning:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=["llama", "gpt2"], default="llama")
    parser.add_argument("--mask", choices=["position_ids", "4d"], default="position_ids")
    parser.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa")
    parser.add_argument("--sources", nargs="*", help="packlm data.sources (default: a tiny corpus)")
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cache-dir", default=None, help="default: a temporary directory")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="packlm-hf-"))
    sources = args.sources or [str(write_corpus(scratch / "corpus"))]
    dm = PackedDataModule(
        sources=sources, window=args.window, stride=args.window // 2, packing="document",
        batch_size=8, num_workers=0, tokenizer={"vocab_size": 320},
        cache_dir=args.cache_dir or scratch / "cache", progress=False,
    )  # fmt: skip
    model = tiny_model(args.arch, dm.vocab_size, args.window, args.attention)
    lit = HFLightning(model, args.mask)
    trainer = L.Trainer(
        max_steps=args.steps, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(lit, datamodule=dm)
    print(f"{args.arch} ({args.mask}): {trainer.global_step} steps, loss {lit.last_loss:.3f}, "
          f"{lit.tokens_seen['supervised']} supervised tokens")  # fmt: skip
    return lit


if __name__ == "__main__":
    main()
