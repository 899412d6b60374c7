"""Checks on `ckpt_path` made before any work starts, so a wrong resume fails in seconds.

A checkpoint from another data plan or another model shape would otherwise fail deep inside
Lightning (or, worse, train on different batches than the run it continues).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from packlm.callbacks.checkpoint_extras import KEY as EXTRAS_KEY
from packlm.config import Validated
from packlm.data.epoch.loader import PLAN_KEYS, check_plan_signature
from packlm.errors import ConfigError
from packlm.model.config import ModelConfig


def run_dir_of(ckpt_path: Path) -> Path:
    if not ckpt_path.is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path}: no such checkpoint")
    parent = ckpt_path.resolve().parent
    return parent.parent if parent.name == "checkpoints" else parent


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint's plain parts (memory-mapped tensors), or a ConfigError naming the file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # truncated, not a checkpoint, unreadable
        raise ConfigError(
            f"ckpt_path={path}: cannot read the checkpoint ({type(e).__name__}: {e})"
        ) from e


def check_resume(path: Any, checkpoint: dict[str, Any], config: Validated) -> None:
    """Refuse, before any work, a checkpoint whose data plan or model differs from the config."""
    if "state_dict" not in checkpoint or "hyper_parameters" not in checkpoint:
        raise ConfigError(f"ckpt_path={path}: not a packlm training checkpoint (no state_dict)")
    data = (checkpoint.get(EXTRAS_KEY) or {}).get("data")
    if data is not None:
        try:
            check_plan_signature(
                {f"data.{k}": data.get(k) for k in PLAN_KEYS},
                {f"data.{k}": getattr(config.data, k) for k in PLAN_KEYS},
            )
        except ConfigError as e:
            raise ConfigError(f"ckpt_path={path}: {e}") from None
    check_model_shape(path, checkpoint, config.model, skip=("vocab_size",))


def check_model_shape(
    path: Any, checkpoint: dict[str, Any], model: ModelConfig, skip: tuple[str, ...] = ()
) -> None:
    saved = (checkpoint.get("hyper_parameters") or {}).get("model") or {}
    changed = [
        f"model.{f.name}: {saved[f.name]!r} in the checkpoint, {getattr(model, f.name)!r} now"
        for f in fields(ModelConfig)
        if f.name in saved and f.name not in skip and saved[f.name] != getattr(model, f.name)
    ]
    if changed:
        raise ConfigError(
            f"ckpt_path={path}: the model differs from the checkpoint's ("
            + "; ".join(changed)
            + "). Resume with the same model settings (vocab_size comes from the tokenizer)."
        )
