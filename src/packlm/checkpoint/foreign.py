"""A checkpoint packlm did not write, or cannot use, is refused in one line naming what is missing.

torch.load reads any torch.save file: a plain dict of tensors, another project's Lightning
checkpoint, a packlm checkpoint of another version. Before, each failed deep inside the
command that used it (a KeyError from Lightning's loading on `ckpt_path=`, a ValueError on
`init_from=`, a size mismatch in load_state_dict in export). `check_packlm` runs in
`read_checkpoint`, which every loader goes through, before anything uses the contents:
the parts packlm reads (`state_dict`, `hyper_parameters["model"]`, the `packlm` entry with
the tokenizer) are there, the model config is one this packlm knows, and the weights are
exactly the ones that config builds (names and shapes, on the meta device: no memory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from packlm.errors import ConfigError

KEY = "packlm"  # = packlm.checkpoint.contents.KEY (contents imports this module)
PREFIX = "model."  # LitCausalLM keeps the Transformer as `self.model`


def check_packlm(checkpoint: Any, path: Path, key: str) -> None:
    """ConfigError `<key>=<path>: ...` unless `checkpoint` is a packlm checkpoint this packlm
    can load."""
    where = f"{key}={path}"
    if not isinstance(checkpoint, dict):
        raise ConfigError(
            f"{where}: not a packlm training checkpoint: the file holds a "
            f"{type(checkpoint).__name__}, not a checkpoint's dict"
        )
    state, hparams = checkpoint.get("state_dict"), checkpoint.get("hyper_parameters")
    extras = checkpoint.get(KEY)
    missing = [
        name
        for name, ok in (
            ("state_dict (the weights)", isinstance(state, dict)),
            (
                "hyper_parameters['model'] (the model config)",
                isinstance(hparams, dict) and isinstance(hparams.get("model"), dict),
            ),
            (
                f"'{KEY}' entry with the tokenizer",
                isinstance(extras, dict) and isinstance(extras.get("tokenizer"), dict),
            ),
        )  # fmt: skip
        if not ok
    ]
    if missing:
        raise ConfigError(
            f"{where}: not a packlm training checkpoint: no {', no '.join(missing)}; it is "
            f"{_what(checkpoint)}. Give a checkpoint written by packlm's train.py"
        )
    _check_weights(where, state, hparams["model"])


def _what(checkpoint: dict[str, Any]) -> str:
    """What the file is, in a few words: whose checkpoint, and its first keys."""
    version = checkpoint.get("pytorch-lightning_version")
    state = checkpoint.get("state_dict")
    keys = list(state) if isinstance(state, dict) else list(checkpoint)
    shown = ", ".join(_short(k) for k in keys[:3]) + (", ..." if len(keys) > 3 else "")
    hparams = checkpoint.get("hyper_parameters")
    if isinstance(hparams, dict) and "model" in hparams and KEY in checkpoint:
        return f"a packlm checkpoint of another version, or edited (weights {shown})"
    if version is not None:
        return f"a Lightning {_short(version)} checkpoint of another module (weights {shown})"
    return f"a dict of {len(checkpoint)} entries ({shown})"


def _short(value: Any, most: int = 40) -> str:
    text = str(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def _check_weights(where: str, state: dict[str, Any], model_values: dict[str, Any]) -> None:
    """The weights are those the recorded model config builds: same names, same shapes."""
    from packlm.config.model import ModelConfig
    from packlm.model.transformer import Transformer

    try:
        model = ModelConfig.from_mapping(model_values)
    except (ConfigError, TypeError, ValueError) as e:
        raise ConfigError(
            f"{where}: a checkpoint of another packlm version: its model config does not load "
            f"here ({_short(e, 200)})"
        ) from None
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in Transformer(model).state_dict().items()}
    got = {
        k[len(PREFIX) :]: tuple(v.shape)
        for k, v in state.items()
        if isinstance(k, str) and k.startswith(PREFIX) and isinstance(v, torch.Tensor)
    }
    problems = [f"no {PREFIX}{k}" for k in sorted(expected.keys() - got.keys())]
    problems += [f"an unknown {PREFIX}{k}" for k in sorted(got.keys() - expected.keys())]
    problems += [
        f"{PREFIX}{k} is {list(got[k])}, the config builds {list(expected[k])}"
        for k in sorted(expected.keys() & got.keys())
        if got[k] != expected[k]
    ]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ConfigError(
            f"{where}: its weights do not match the model config it records: "
            f"{'; '.join(problems[:3])}{more} (a checkpoint of another packlm version, or edited)"
        )
