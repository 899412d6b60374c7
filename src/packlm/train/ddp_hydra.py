"""Lightning's DDP relaunch inside a Hydra multirun: run this job, in this job's directory."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import read_write

DDP_ENV = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@contextlib.contextmanager
def ddp_relaunch_runs_this_job(trainer: L.Trainer) -> Iterator[None]:
    """Inside a Hydra multirun, make Lightning's DDP relaunch run this job, then clean up.

    Lightning starts ranks > 0 as `python train.py <sys.argv[1:]> hydra.run.dir=<run.dir>`:
    in a multirun that is the whole sweep again (`-m` and every value), written to a new sweep
    directory (Hydra #2070 / Lightning #11300). For the duration of the job, sys.argv becomes
    this job's own overrides and run.dir its output directory, so each child runs exactly this
    job in it; afterwards the process group and the launcher's environment variables are
    removed, or the next job would take LOCAL_RANK for "already launched" and wait forever.
    A single run (no -m) needs none of this: run.dir is already the output directory.
    """
    launcher = getattr(trainer.strategy, "launcher", None)
    relaunches = type(launcher).__name__ == "_SubprocessScriptLauncher"  # ddp, or auto on >1 device
    if not (relaunches and HydraConfig.initialized() and "LOCAL_RANK" not in os.environ):
        yield
        return
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        yield
        return
    argv, run_dir = sys.argv, hydra_cfg.run.dir
    sys.argv = [argv[0], *hydra_cfg.overrides.task]
    with read_write(hydra_cfg):
        hydra_cfg.run.dir = hydra_cfg.runtime.output_dir
    try:
        yield
    finally:
        sys.argv = argv
        with read_write(hydra_cfg):
            hydra_cfg.run.dir = run_dir
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for key in DDP_ENV:
            os.environ.pop(key, None)
