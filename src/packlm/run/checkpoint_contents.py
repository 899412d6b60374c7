"""What packlm adds to a Lightning checkpoint, under KEY, and reading it back without Lightning.

`packlm.callbacks.CheckpointExtras` writes it (the tokenizer's state, the data config, the
run settings a resume compares); generate, evaluate, export and resume read it here, so a
tool that only reads a checkpoint never imports Lightning (about 4 s of start-up).
"""

from __future__ import annotations

from typing import Any

KEY = "packlm"


def tokenizer_from_checkpoint(checkpoint: dict[str, Any]):
    """The Tokenizer stored by CheckpointExtras; a clear error for checkpoints without one."""
    from packlm.tokenizer import Tokenizer

    extras = checkpoint.get(KEY)
    if not extras or "tokenizer" not in extras:
        raise ValueError("checkpoint has no packlm tokenizer (not written by packlm's train.py)")
    state = dict(extras["tokenizer"])
    return Tokenizer(**state)
