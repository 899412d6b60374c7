"""Lightning callbacks of the training run: budgets, checkpoints, TensorBoard pictures and text."""

from packlm.callbacks.batch_hashes import BatchHashes
from packlm.callbacks.batch_images import BatchImages
from packlm.callbacks.budget import SupervisedTokenBudget
from packlm.callbacks.checkpoint_extras import CheckpointExtras
from packlm.callbacks.checkpointing import (
    AtomicCheckpointIO,
    GracefulStop,
    LastCheckpoint,
    TrainingStopped,
)
from packlm.callbacks.text_samples import TextSamples
from packlm.callbacks.token_axis import SupervisedTokenAxis

__all__ = [
    "AtomicCheckpointIO",
    "BatchHashes",
    "BatchImages",
    "CheckpointExtras",
    "GracefulStop",
    "LastCheckpoint",
    "SupervisedTokenAxis",
    "SupervisedTokenBudget",
    "TextSamples",
    "TrainingStopped",
]
