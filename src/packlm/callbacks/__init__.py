"""Lightning callbacks of the training run, one concern each.

- `step_metrics.py`: `StepMetrics` logs loss, lr, grad norm, token counts and throughput.
- `source_loss.py`: `SourceLosses`, the loss of each data source (train and validation) and
  the hardest validation documents.
- `mixture_chart.py`: `MixtureChart`, a mixture's realized and scheduled share of each
  source on one chart, every optimizer step.
- `token_axis.py`: `SupervisedTokenAxis` logs the curves again against supervised tokens
  (the `Loss/` group TensorBoard opens first: `packlm.train.tensorboard.RunTensorBoard`).
- `budget.py`: `SupervisedTokenBudget` stops after `train.max_supervised_tokens`.
- `checkpointing.py`: atomic checkpoint writes, `last.ckpt` every N steps, the best one.
- `graceful_stop.py`: SIGTERM / Ctrl-C finish the step, write `last.ckpt` and stop.
- `finite_training.py`: a stop at the first non-finite loss (never a checkpoint of NaN weights).
- `resumed_settings.py`: `ResumedSettings`, a resume applies the current optimizer settings.
- `batch_hashes.py`: `BatchHashes`, per-batch hashes for comparing runs (debugging, tests).
- `progress_bar.py`: `EpochProgressBar` (rich) and `RunProgressBar` (tqdm), Lightning's bars
  ending where the run ends (max_steps, the token budget, max_time), without "Epoch 3/-2".
- `progress_lines.py`: `ProgressLines`, a plain progress line at an interval when no terminal
  shows the bar (a log file), and one line per validation.
- `views/`: what TensorBoard shows of the data path (batch images, epoch tables, coverage,
  a decoded row, HParams, text samples, the source names' paths).
"""

from packlm.callbacks.batch_hashes import BatchHashes
from packlm.callbacks.budget import SupervisedTokenBudget
from packlm.callbacks.checkpointing import AtomicCheckpointIO, BestCheckpoint, LastCheckpoint
from packlm.callbacks.finite_training import FiniteTraining
from packlm.callbacks.graceful_stop import GracefulStop, TrainingStopped
from packlm.callbacks.mixture_chart import MixtureChart
from packlm.callbacks.progress_bar import (
    EpochProgressBar,
    RunProgressBar,
    TokenBudget,
    rich_available,
)
from packlm.callbacks.progress_lines import ProgressLines
from packlm.callbacks.resumed_settings import ResumedSettings
from packlm.callbacks.source_loss import SourceLosses
from packlm.callbacks.step_metrics import StepMetrics
from packlm.callbacks.token_axis import SupervisedTokenAxis
from packlm.callbacks.views import (
    BatchImages,
    EpochStatistics,
    HParams,
    SourceTable,
    TextSamples,
    TrainingRowText,
)
from packlm.checkpoint.last import TrainingDiverged

__all__ = [
    "AtomicCheckpointIO",
    "BatchHashes",
    "BatchImages",
    "BestCheckpoint",
    "EpochProgressBar",
    "RunProgressBar",
    "EpochStatistics",
    "FiniteTraining",
    "GracefulStop",
    "HParams",
    "LastCheckpoint",
    "MixtureChart",
    "ProgressLines",
    "ResumedSettings",
    "SourceLosses",
    "SourceTable",
    "StepMetrics",
    "SupervisedTokenAxis",
    "SupervisedTokenBudget",
    "TextSamples",
    "TrainingDiverged",
    "TrainingRowText",
    "TrainingStopped",
    "TokenBudget",
    "rich_available",
]
