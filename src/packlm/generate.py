"""`python -m packlm.generate ckpt_path=... 'prompt="..."'`: sample text from a checkpoint.

The checkpoint carries its own tokenizer (see packlm.checkpoint.extras), so
nothing but the checkpoint file is needed.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from packlm.checkpoint.load import load_checkpoint
from packlm.config import CONFIG_DIR
from packlm.errors import one_line_errors
from packlm.model.sampling import sample_text
from packlm.model.transformer import Transformer


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
    """Texts (prompt + continuation) sampled from the checkpoint's model (the bare
    Transformer: sampling needs neither the LightningModule nor Lightning)."""
    checkpoint = load_checkpoint(ckpt_path)  # clear errors naming ckpt_path
    model = Transformer(checkpoint.model)
    model.load_state_dict(checkpoint.weights)
    model.to(device).eval()
    return [
        sample_text(
            model,
            checkpoint.tokenizer,
            prompt,
            max_new_tokens,
            checkpoint.model.context_length,
            temperature=temperature,
            top_k=top_k,
            seed=seed + k,
            device=device,
        )
        for k in range(num_samples)
    ]


@hydra.main(config_path=CONFIG_DIR, config_name="generate", version_base=None)
def main(cfg: DictConfig) -> None:
    """Bad input (config, checkpoint, files) prints one line and exits 2 (config) or 1;
    HYDRA_FULL_ERROR=1 shows the traceback."""
    with one_line_errors(ValueError, OSError, ImportError, MissingMandatoryValue):
        texts = generate(
            cfg.ckpt_path, cfg.prompt, cfg.max_new_tokens, cfg.temperature, cfg.top_k,
            cfg.num_samples, cfg.seed, cfg.device,
        )  # fmt: skip
    print("\n\n---\n\n".join(texts))


if __name__ == "__main__":
    main()
