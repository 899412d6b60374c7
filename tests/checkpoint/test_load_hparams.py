"""A checkpoint whose saved model settings are damaged or foreign is refused in one line that
names the file (load_checkpoint: generate, evaluate, export, trace read through it)."""

from __future__ import annotations

import pytest
import torch

from helpers.exports import SPECIALS, TEXTS, write_checkpoint
from packlm.checkpoint.load import load_checkpoint
from packlm.errors import ConfigError
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator


@pytest.fixture(scope="module")
def tiny_tokenizer() -> Tokenizer:
    return Tokenizer(*train_bpe_from_iterator(TEXTS * 4, 300, SPECIALS, num_workers=1), SPECIALS)


@pytest.mark.parametrize(
    ("model", "says"),
    [({"n_layer": -1}, "model.n_layer"), ({"qk_norm": "false"}, "model.qk_norm"),
     ({"n_embd": "wide"}, "model.n_embd"), ({"no_such_key": 1}, "no_such_key"),
     ("a string", "not a packlm training checkpoint")],
)  # fmt: skip
def test_damaged_model_hparams_name_the_checkpoint(tmp_path, tiny_tokenizer, model, says):
    path = tmp_path / "last.ckpt"
    write_checkpoint(path, tiny_tokenizer)
    ckpt = torch.load(path, weights_only=False)
    saved = ckpt["hyper_parameters"]["model"]
    ckpt["hyper_parameters"]["model"] = {**saved, **model} if isinstance(model, dict) else model
    torch.save(ckpt, path)
    with pytest.raises(ConfigError) as e:
        load_checkpoint(path)
    line = str(e.value)
    assert line.startswith(f"ckpt_path={path}: ") and says in line and "\n" not in line
