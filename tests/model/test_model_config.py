"""ModelConfig / OptimConfig validation: a bad value fails fast and names its key."""

from __future__ import annotations

import pytest

from packlm.config.model import ModelConfig, OptimConfig, as_dict
from packlm.errors import ConfigError


def test_defaults_are_valid_and_small():
    cfg = ModelConfig().validate()
    assert cfg.head_dim * cfg.n_head == cfg.n_embd
    assert cfg.mlp_hidden % 32 == 0 and cfg.mlp_hidden >= cfg.mlp_ratio * cfg.n_embd
    OptimConfig().validate()


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"n_embd": 130, "n_head": 4}, "model.n_embd"),
        ({"n_embd": 12, "n_head": 4}, "model.n_head"),  # head width 3 is odd: no RoPE pairs
        ({"vocab_size": 0}, "model.vocab_size"),
        ({"n_layer": -1}, "model.n_layer"),
        ({"context_length": 2.5}, "model.context_length"),
        ({"dropout": 1.0}, "model.dropout"),
        ({"mlp_ratio": 0}, "model.mlp_ratio"),
        ({"attention": "flash"}, "model.attention"),
    ],
)
def test_model_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=rf"^{key}\b"):
        ModelConfig(**overrides).validate()


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"lr": 0}, "optim.lr"),
        ({"weight_decay": -0.1}, "optim.weight_decay"),
        ({"embedding_lr_ratio": 0}, "optim.embedding_lr_ratio"),
        ({"embedding_lr_ratio": "10"}, "optim.embedding_lr_ratio"),
        ({"betas": (0.9, 1.0)}, "optim.betas"),
        ({"warmup_steps": -1}, "optim.warmup_steps"),
        ({"max_steps": 0}, "optim.max_steps"),
        ({"min_lr_ratio": 1.5}, "optim.min_lr_ratio"),
    ],
)
def test_optim_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=rf"^{key}\b"):
        OptimConfig(**overrides).validate()


def test_from_mapping_and_unknown_key():
    cfg = OptimConfig.from_mapping({"lr": 1e-3, "betas": [0.8, 0.9]})
    assert cfg.betas == (0.8, 0.9) and cfg.lr == 1e-3
    assert as_dict(cfg)["betas"] == [0.8, 0.9]  # YAML-friendly
    with pytest.raises(ConfigError, match=r"^model\.n_embed\b"):
        ModelConfig.from_mapping({"n_embed": 64})
    with pytest.raises(ConfigError, match=r"^model\.n_embd\b"):
        ModelConfig.from_mapping({"n_embd": 130})
