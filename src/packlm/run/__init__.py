"""What `train(cfg)` needs besides building data and model: the checks of a resume, and
the DDP relaunch inside Hydra's `-m` sweeps.

1. `resume.py`: ckpt_path -> the run it belongs to, its checkpoint read once, every setting
   that must match checked (data plan, model shape) with the key named.
2. `ddp_hydra.py`: one job of a sweep launches its own ranks and cleans up after them.
"""

from packlm.run.ddp_hydra import ddp_relaunch_runs_this_job
from packlm.run.resume import check_model_shape, check_resume, read_checkpoint, run_dir_of

__all__ = [
    "check_model_shape",
    "check_resume",
    "ddp_relaunch_runs_this_job",
    "read_checkpoint",
    "run_dir_of",
]
