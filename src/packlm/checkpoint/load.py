"""What every export reads from a packlm checkpoint: weights, model config, tokenizer."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from packlm.checkpoint.contents import KEY as EXTRAS_KEY
from packlm.checkpoint.contents import read_checkpoint, tokenizer_from_checkpoint
from packlm.config.model import ModelConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.errors import ConfigError, bounded

log = logging.getLogger(__name__)

PREFIX = "model."  # LitCausalLM keeps the Transformer as `self.model`


@dataclass(frozen=True)
class Checkpoint:
    weights: dict[str, torch.Tensor]
    """The Transformer's state dict (keys as in packlm.model.transformer)."""
    model: ModelConfig
    tokenizer: Any
    data: dict[str, Any]
    """The data config the run trained with ({} if the checkpoint has none)."""


def load_checkpoint(ckpt_path: str | Path) -> Checkpoint:
    """Read a train.py checkpoint; errors name `ckpt_path`."""
    if ckpt_path is None or str(ckpt_path) == "":
        raise ConfigError("ckpt_path: give the checkpoint to read (ckpt_path=<file.ckpt>)")
    path = Path(ckpt_path)
    if not path.exists():
        raise ConfigError(f"ckpt_path={ckpt_path}: no such checkpoint")
    ckpt = read_checkpoint(path)
    hparams = ckpt.get("hyper_parameters") or {}
    if "state_dict" not in ckpt or "model" not in hparams:
        raise ConfigError(f"ckpt_path={ckpt_path}: not a packlm training checkpoint")
    try:
        tokenizer = tokenizer_from_checkpoint(ckpt)
    except ValueError as e:
        raise ConfigError(f"ckpt_path={ckpt_path}: {e}") from None
    weights = {k[len(PREFIX) :]: v for k, v in ckpt["state_dict"].items() if k.startswith(PREFIX)}
    model = ModelConfig.from_mapping(hparams["model"])
    data = dict((ckpt.get(EXTRAS_KEY) or {}).get("data") or {})
    return Checkpoint(weights, model, tokenizer, data)


def tokenizer_config_of(tokenizer, cache_dir: str | Path) -> TokenizerConfig:
    """A `tokenizer` config that loads exactly `tokenizer` (saved once under
    `<cache_dir>/tokenizers/checkpoint-<digest>`), so stores are encoded with the ids the
    checkpoint's model was trained on."""
    from packlm.cache.entry import mark_used, replace_dir, temporary_sibling
    from packlm.tokenizer.obtain import TOKENIZERS_DIR

    root = Path(cache_dir).expanduser().resolve() / TOKENIZERS_DIR
    dest = root / f"checkpoint-{tokenizer.digest()}"
    problem = _saved_copy_problem(tokenizer, dest, root)
    if problem is None:
        mark_used(dest)
    else:
        if problem:
            log.warning("%s: a damaged copy of the checkpoint's tokenizer (%s); written again",
                        dest, bounded(problem, 300))  # fmt: skip
        tmp = temporary_sibling(dest)
        try:
            tokenizer.save(tmp)
            replace_dir(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return TokenizerConfig(special_tokens=list(tokenizer.special_tokens), pattern=tokenizer.pattern,
                           path=str(dest))  # fmt: skip


def _saved_copy_problem(tokenizer, dest: Path, root: Path) -> str | None:
    """None when `dest` loads as `tokenizer` (its digest); "" when it is not there; else what
    is wrong with it (cut short, emptied, edited: a derived copy, so it is written again)."""
    if not (dest.exists() or dest.is_symlink()):
        return ""
    try:
        found = type(tokenizer).load(dest, cache_dir=root).digest()
    except (OSError, ValueError) as e:
        return str(e).removeprefix(f"{dest}: ")
    return None if found == tokenizer.digest() else f"digest {found}, not {tokenizer.digest()}"
