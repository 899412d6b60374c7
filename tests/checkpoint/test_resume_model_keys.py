"""Which model keys a resume may change: the run-time ones and the initialisation of fresh
weights (a resume loads its weights), never a key that changes the weights' shape or use."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from packlm.checkpoint.resume import NOT_SHAPE, check_model_shape
from packlm.config.model import ModelConfig
from packlm.errors import ConfigError


def saved(model: ModelConfig) -> dict:
    return {"hyper_parameters": {"model": asdict(model)}}


@pytest.mark.parametrize(
    "change", [{"zero_init_proj": True}, {"dropout": 0.1}, {"attention": "sdpa"}]
)
def test_a_resume_may_change_how_weights_start_or_run(change):
    before = ModelConfig()
    check_model_shape("last.ckpt", saved(before), replace(before, **change))


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"qk_norm": True}, "model.qk_norm"),
        ({"mlp": "relu2"}, "model.mlp"),
        ({"residual_scalars": True}, "model.residual_scalars"),
        ({"logit_softcap": 15.0}, "model.logit_softcap"),
        ({"n_layer": 3}, "model.n_layer"),
    ],
)
def test_a_resume_refuses_a_key_that_changes_what_the_weights_compute(change, key):
    before = ModelConfig()
    with pytest.raises(ConfigError, match=rf"^ckpt_path=last\.ckpt: the model differs .*{key}"):
        check_model_shape("last.ckpt", saved(before), replace(before, **change))


def test_every_exempt_key_is_a_model_key():
    names = {f for f in asdict(ModelConfig())}
    assert set(NOT_SHAPE) <= names
