"""Lightning callbacks of the training run, one concern each.

- `step_metrics.py`: `StepMetrics` logs loss, lr, grad norm, token counts and throughput.
- `token_axis.py`: `SupervisedTokenAxis` logs the curves again against supervised tokens.
- `budget.py`: `SupervisedTokenBudget` stops after `train.max_supervised_tokens`.
- `checkpointing.py`: atomic checkpoint writes, `last.ckpt` every N steps, clean stops on
  SIGTERM / Ctrl-C.
- `checkpoint_extras.py`: the tokenizer and data config travel inside each checkpoint.
- `batch_images.py`, `text_samples.py`: TensorBoard pictures of a batch, generated text.
- `batch_hashes.py`: `BatchHashes`, per-batch hashes for comparing runs (debugging, tests).
"""

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
from packlm.callbacks.step_metrics import StepMetrics
from packlm.callbacks.text_samples import TextSamples
from packlm.callbacks.token_axis import SupervisedTokenAxis

__all__ = [
    "AtomicCheckpointIO",
    "BatchHashes",
    "BatchImages",
    "CheckpointExtras",
    "GracefulStop",
    "LastCheckpoint",
    "StepMetrics",
    "SupervisedTokenAxis",
    "SupervisedTokenBudget",
    "TextSamples",
    "TrainingStopped",
]
