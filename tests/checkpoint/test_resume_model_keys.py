"""Which model keys a resume may change: the run-time ones and the initialisation of fresh
weights (a resume loads its weights), never a key that changes the weights' shape or use."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from packlm.checkpoint.resume import NOT_SHAPE, check_chat_supervised, check_model_shape
from packlm.config.data import DataConfig
from packlm.config.model import ModelConfig
from packlm.errors import ConfigError


def saved(model: ModelConfig) -> dict:
    return {"hyper_parameters": {"model": asdict(model)}}


@pytest.mark.parametrize(
    "change",
    [{"zero_init_proj": True}, {"dropout": 0.1}, {"attention": "sdpa"}, {"compile": True},
     {"compile": "auto"}],
)  # fmt: skip
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


CURRICULUM = [{"window": 8, "until": 100}, {"window": 16}]


@pytest.mark.parametrize("curriculum", [None, CURRICULUM])
@pytest.mark.parametrize(
    ("before", "now"), [("assistant", "assistant"), ("all", "all"), (None, "assistant")]
)
def test_the_same_chat_mask_resumes_with_or_without_a_curriculum(curriculum, before, now):
    saved = {} if before is None else {"chat_supervised": before}  # None: an older checkpoint
    check_chat_supervised(
        "last.ckpt", saved, DataConfig(chat_supervised=now, curriculum=curriculum)
    )


@pytest.mark.parametrize(
    ("before", "now"), [("assistant", "all"), ("all", "assistant"), (None, "all")]
)
def test_another_chat_mask_is_refused_only_under_a_curriculum(before, now):
    saved = {} if before is None else {"chat_supervised": before}
    check_chat_supervised("last.ckpt", saved, DataConfig(chat_supervised=now))  # labels only
    shown = "assistant" if before is None else before
    with pytest.raises(ConfigError, match=(
        rf"^ckpt_path=last\.ckpt: data\.chat_supervised: '{shown}' in the checkpoint, '{now}' now; "
        r"under data\.curriculum")):  # fmt: skip
        check_chat_supervised(
            "last.ckpt", saved, DataConfig(chat_supervised=now, curriculum=CURRICULUM)
        )
