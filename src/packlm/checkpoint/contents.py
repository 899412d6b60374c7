"""What packlm adds to a Lightning checkpoint, under KEY, and reading it back without Lightning.

`packlm.callbacks.CheckpointExtras` writes it (the tokenizer's state, the data config, the
run settings a resume compares); generate, evaluate, export and resume read it here, so a
tool that only reads a checkpoint never imports Lightning (about 4 s of start-up).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch

from packlm.errors import ConfigError

KEY = "packlm"


def tokenizer_from_checkpoint(checkpoint: dict[str, Any]):
    """The Tokenizer stored by CheckpointExtras; a clear error for checkpoints without one."""
    from packlm.tokenizer import Tokenizer

    extras = checkpoint.get(KEY)
    if not extras or "tokenizer" not in extras:
        raise ValueError("checkpoint has no packlm tokenizer (not written by packlm's train.py)")
    state = dict(extras["tokenizer"])
    return Tokenizer(**state)


def run_dir_of(ckpt_path: Path) -> Path:
    _refuse_a_directory(ckpt_path, "ckpt_path")
    if not ckpt_path.is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path}: no such checkpoint")
    parent = ckpt_path.resolve().parent
    return parent.parent if parent.name == "checkpoints" else parent


def read_checkpoint(path: Path, key: str = "ckpt_path") -> dict[str, Any]:
    """The checkpoint's plain parts (memory-mapped tensors), or a ConfigError naming the file.

    torch.save writes a zip archive; anything else (random bytes, a file cut short, which
    loses the archive's directory at its end) is said so, not with torch's advice to save
    with `_use_new_zipfile_serialization` that mmap gives for any non-zip file. A damaged one
    (an entry that fails its CRC32, a non-finite weight) is refused naming the entry or the
    weight (packlm.checkpoint.verify). One packlm did not write, or cannot use (another
    program's, another version's), is refused naming what is missing (`foreign.py`)."""
    from packlm.checkpoint.foreign import check_packlm
    from packlm.checkpoint.verify import check_entries, check_finite

    _refuse_a_directory(path, key)
    if path.is_file() and path.stat().st_size == 0:
        raise ConfigError(f"{key}={path}: an empty file, not a checkpoint")
    if path.is_file() and not zipfile.is_zipfile(path):
        raise ConfigError(f"{key}={path}: not a checkpoint (not a torch zip archive / truncated)")
    if path.is_file():
        check_entries(path, key)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # truncated, not a checkpoint, unreadable
        raise ConfigError(
            f"{key}={path}: cannot read the checkpoint ({type(e).__name__}: {e})"
        ) from e
    check_packlm(checkpoint, path, key)
    check_finite(checkpoint, path, key)
    return checkpoint


def _refuse_a_directory(path: Path, key: str) -> None:
    if path.is_dir():
        inside = path / "checkpoints" / "last.ckpt"
        hint = f" (its run's last one is {inside})" if inside.is_file() else ""
        raise ConfigError(f"{key}={path}: a directory, not a checkpoint file{hint}")
