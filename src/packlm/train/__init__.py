"""`python train.py`: one training job and what only it needs.

1. `job.py`: `train(cfg)` composes data and model, fits, validates and reports; `main` is
   the Hydra entry point (the Lightning+Hydra template's split).
2. `loggers.py`: the `logger` and `callbacks` config groups -> Lightning objects.
3. `tensorboard.py`: the run's TensorBoard logger (the `Loss/` group first, the token-axis
   writer, a resume's `purge_step`).
4. `ddp_hydra.py`: one job of a sweep launches its own DDP ranks and cleans up after them.
5. `report.py`: what the terminal shows (the model's size, the final summary).
6. `allocator.py`: the opt-in `train.keep_freed_memory` (glibc's malloc thresholds).
"""

from packlm.train.job import main, train

__all__ = ["main", "train"]
