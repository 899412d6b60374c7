"""`python -m packlm.generate ckpt_path=... 'prompt="..."'`: sample text from a checkpoint.

The checkpoint carries its own tokenizer (see packlm.checkpoint.extras), so
nothing but the checkpoint file is needed. With `chat=true` the prompt is a user's message,
rendered in the chat format training used (docs/conversations.md), and the answer is
sampled until the end-of-turn token `<|im_end|>`.
"""

from __future__ import annotations

import math
from pathlib import Path

import hydra
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from packlm.config.help import exit_if_help
from packlm.config.precheck import precheck
from packlm.config.schema import CONFIG_DIR
from packlm.errors import ConfigError, one_line_errors


def generate(
    ckpt_path: str | Path,
    prompt: str = "",
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = 50,
    num_samples: int = 1,
    seed: int = 0,
    device: str = "cpu",
    chat: bool = False,
) -> list[str]:
    """Texts (prompt + continuation) sampled from the checkpoint's model (the bare
    Transformer: sampling needs neither the LightningModule nor Lightning); with `chat` the
    assistant's answers to the user message `prompt`, each stopped at `<|im_end|>` (one that
    ran out of max_new_tokens first ends with " [no <|im_end|> within max_new_tokens]")."""
    from packlm.checkpoint.load import load_checkpoint  # torch: not for `--help`
    from packlm.model.sampling import sample_reply, sample_text
    from packlm.model.transformer import Transformer
    from packlm.tokenizer.chat import ChatTokenError

    check_options(prompt, max_new_tokens, temperature, top_k, num_samples, seed, chat)
    check_device(device)
    checkpoint = load_checkpoint(ckpt_path)  # clear errors naming ckpt_path
    model = Transformer(checkpoint.model)
    model.load_state_dict(checkpoint.weights)
    model.to(device).eval()
    if chat:
        replies = []
        for k in range(num_samples):
            try:
                reply, ended = sample_reply(
                    model, checkpoint.tokenizer, [("user", prompt)], max_new_tokens,
                    checkpoint.model.context_length, temperature, top_k, seed + k, device,
                )  # fmt: skip
            except ChatTokenError as e:
                raise ConfigError(f"chat=true: ckpt_path={str(ckpt_path)!r}: {e}") from None
            replies.append(reply if ended else f"{reply} [no <|im_end|> within max_new_tokens]")
        return replies
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


def check_options(
    prompt, max_new_tokens, temperature, top_k, num_samples, seed, chat=False
) -> None:
    """Refuse meaningless options before the checkpoint is read (and, from the precheck,
    before torch is imported): a negative or zero `max_new_tokens` used to print the prompt
    and exit 0, a NaN temperature to sample noise."""

    def integer(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not isinstance(prompt, str):
        raise ConfigError(f"prompt={prompt!r}: must be a string (quote it: 'prompt=\"...\"')")
    for key, value in (("max_new_tokens", max_new_tokens), ("num_samples", num_samples)):
        if not integer(value) or value < 1:
            raise ConfigError(f"{key}={value!r}: must be a positive integer")
    if not (integer(temperature) or isinstance(temperature, float)) or not (
        math.isfinite(temperature) and temperature >= 0
    ):
        raise ConfigError(f"temperature={temperature!r}: must be a finite number >= 0 (0: greedy)")
    if top_k is not None and (not integer(top_k) or top_k < 1):
        raise ConfigError(f"top_k={top_k!r}: must be a positive integer or null (no top-k)")
    if not integer(seed) or not 0 <= seed < 2**63:
        raise ConfigError(f"seed={seed!r}: must be an integer from 0 to 2**63 - 1")
    if not isinstance(chat, bool):
        raise ConfigError(f"chat={chat!r}: must be true or false")


def check_device(device) -> None:
    """A torch device this machine has (torch itself says which names exist)."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ConfigError(
            f"device={device!r}: not a torch device (cpu, cuda, cuda:1, mps)"
        ) from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={device!r}: CUDA is not available here (device=cpu)")


@hydra.main(config_path=CONFIG_DIR, config_name="generate", version_base=None)
def main(cfg: DictConfig) -> None:
    """Bad input (config, checkpoint, files) prints one line and exits 2 (config) or 1;
    HYDRA_FULL_ERROR=1 shows the traceback."""
    with one_line_errors(ValueError, OSError, ImportError, MissingMandatoryValue):
        texts = generate(
            cfg.ckpt_path, cfg.prompt, cfg.max_new_tokens, cfg.temperature, cfg.top_k,
            cfg.num_samples, cfg.seed, cfg.device, cfg.chat,
        )  # fmt: skip
    print("\n\n---\n\n".join(texts))


def check_config(cfg: DictConfig) -> None:
    """The precheck's validation: every option but the device (torch's to judge)."""
    check_options(cfg.prompt, cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.num_samples,
                  cfg.seed, cfg.chat)  # fmt: skip


if __name__ == "__main__":
    exit_if_help("generate")
    precheck("generate", check_config)
    main()
