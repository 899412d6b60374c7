"""What TensorBoard shows beyond the curves: pictures, tables and text of the data path.

1. `batch_images.py`: `BatchImages`, the first batch's attention mask (its busiest row) and
   the layout of the whole batch (document colour, supervised or not, PAD).
2. `epoch_statistics.py`: `EpochStatistics`, each epoch's plan statistics as a markdown table
   and a coverage image (how often each token is a target, where windows start).
3. `row_text.py`: `TrainingRowText`, one training row decoded with document boundaries and
   unsupervised spans marked.
4. `hparams.py`: `HParams`, one HParams row per run with the columns a sweep compares.
5. `text_samples.py`: `TextSamples`, text generated after each validation.
6. `source_table.py`: `SourceTable`, which path each source name in the tags stands for.
7. `render.py`: the matplotlib drawing they share; `tensorboard.py`: the run's TensorBoard logger.
"""

from packlm.callbacks.views.batch_images import BatchImages
from packlm.callbacks.views.epoch_statistics import EpochStatistics
from packlm.callbacks.views.hparams import HParams
from packlm.callbacks.views.row_text import TrainingRowText
from packlm.callbacks.views.source_table import SourceTable
from packlm.callbacks.views.text_samples import TextSamples

__all__ = [
    "BatchImages",
    "EpochStatistics",
    "HParams",
    "SourceTable",
    "TextSamples",
    "TrainingRowText",
]
