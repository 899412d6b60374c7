"""Where the Hydra configs live and how a composed config becomes validated dataclasses."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from packlm.data.config import DataConfig
from packlm.tokenizer.config import TokenizerConfig

# conf/ at the top of the project (src/packlm/config.py -> ../../conf); PACKLM_CONFIG_DIR overrides.
CONFIG_DIR = str(
    Path(os.environ.get("PACKLM_CONFIG_DIR", Path(__file__).resolve().parents[2] / "conf"))
)


def data_config(cfg: DictConfig) -> DataConfig:
    """The validated `data` group of a composed config."""
    return DataConfig(**_plain(cfg.data)).validate()


def tokenizer_config(cfg: DictConfig) -> TokenizerConfig:
    """The validated `tokenizer` group of a composed config."""
    return TokenizerConfig(**_plain(cfg.tokenizer)).validate()


def _plain(node) -> dict:
    values = OmegaConf.to_container(node, resolve=True)
    values.pop("_target_", None)
    return values
