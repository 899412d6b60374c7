"""`python train.py`: one training job and what only it needs.

1. `job.py`: `train(cfg)` checks the config, locks the run folder, prepares the data, fits,
   validates and reports; `main` is the Hydra entry point (the Lightning+Hydra template's split).
2. `compose.py`: the run's callbacks in order, its loggers, the Trainer and the module.
3. `loggers.py`: the `logger` and `callbacks` config groups -> Lightning objects.
4. `tensorboard.py`: the run's TensorBoard logger (the `Loss/` group first, the token-axis
   writer, a resume's `purge_step`).
5. `ddp_hydra.py`: one job of a sweep launches its own DDP ranks and cleans up after them.
6. `report.py`: what the terminal shows (data counts, the model's size, the final summary).
7. `allocator.py`: the opt-in `train.keep_freed_memory` (glibc's malloc thresholds).

`main` answers `--help` and checks the command line (`packlm.config.precheck`: unknown keys
and options, types, values, credentials in URLs; `--cfg` prints only a config a run accepts)
before torch and Lightning are imported (tens of seconds on a busy machine) and before Hydra
writes the run folder; `train` is job.py's, imported on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["main", "train"]


def main(cfg: Any = None) -> Any:
    """`python train.py`: the help and the config's check without the heavy imports, else
    job.py's main (Hydra's entry point; given a composed `cfg`, called as Hydra would)."""
    if cfg is None:
        from packlm.config.help import exit_if_help
        from packlm.config.precheck import precheck, validate_train

        exit_if_help("train")
        precheck("config", validate_train)
    from packlm.train.job import main as job_main

    if cfg is None:
        from packlm.runtime.interrupt import stop_if_interrupted

        stop_if_interrupted()  # a Ctrl-C the imports swallowed still stops the run here
    return job_main() if cfg is None else job_main(cfg)


def __getattr__(name: str) -> Any:
    if name == "train":  # job.py imports torch and Lightning: only when a run needs them
        from packlm.train.job import train

        return train
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
