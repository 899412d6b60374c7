"""`python train.py`: compose the config, build data and model, fit, validate, report.

`train(cfg)` does the work and returns the final metrics, so tests and notebooks call it
directly; `main` is only the Hydra entry point (the Lightning+Hydra template's split).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from packlm.callbacks import (
    TrainingDiverged,
    TrainingStopped,
)
from packlm.checkpoint.contents import read_checkpoint, run_dir_of
from packlm.checkpoint.resume import (
    changed_settings,
    check_init_from,
    check_model_shape,
    check_resume,
)
from packlm.config.schema import CONFIG_DIR, Validated, validate_config
from packlm.data.datamodule import PackedDataModule
from packlm.data.store.sources import SourceError
from packlm.data.store.token_store import StoreError
from packlm.errors import ConfigError, one_line_errors
from packlm.runtime.run_folder import (
    RunFolderTaken,
    check_fresh_folder,
    check_not_foreign,
    check_writable,
)
from packlm.runtime.run_records import commit, discard_pending
from packlm.train.allocator import keep_freed_memory
from packlm.train.compose import compose, model_vocab
from packlm.train.ddp_hydra import ddp_relaunch_runs_this_job
from packlm.train.report import (
    Ran,
    log_data_counts,
    log_model_size,
    quiet_lightning_leaf_spec,
    quiet_lightning_noise,
    stop_reason,
    summary,
    vocab_note,
)
from packlm.train.resume_config import resume_config
from packlm.train.run_lock import RunLocked, run_lock

log = logging.getLogger(__name__)


def train(
    cfg: DictConfig,
    run_dir: str | Path | None = None,
    callbacks: Sequence[L.Callback] = (),
) -> dict[str, float]:
    """Train one run in `run_dir` (default: Hydra's output dir) and return its final metrics.

    `callbacks` are added to the run's own (tests, notebooks). SIGTERM or Ctrl-C stop the
    run after the current optimizer step with `checkpoints/last.ckpt` written, and raise
    `TrainingStopped` (`main` turns it into exit code 128 + the signal number).
    A fresh run into a folder holding another run's checkpoints is refused (RunFolderTaken)
    unless cfg.overwrite_run; the run's record is written once every check has passed
    (packlm.runtime.run_records.commit).
    """
    config = validate_config(cfg)  # every key checked before any work starts
    _check_strategy_fits_the_machine(config.trainer.strategy, config.trainer.accelerator)
    checkpoint = init = None
    if cfg.ckpt_path:  # resume: keep writing into the run the checkpoint belongs to
        run_dir = run_dir_of(Path(cfg.ckpt_path))
        checkpoint = read_checkpoint(Path(cfg.ckpt_path))
        check_resume(cfg.ckpt_path, checkpoint, config)
    if cfg.init_from:
        init = read_checkpoint(Path(cfg.init_from), key="init_from")
    run_dir = Path(run_dir or HydraConfig.get().runtime.output_dir)
    check_writable(run_dir, "the run directory (hydra.run.dir)")
    check_writable(Path(cfg.cache_dir), "cache_dir")
    owns_folder = rank_zero_only.rank == 0  # DDP: rank 0 holds the run folder for all ranks
    if owns_folder and not cfg.ckpt_path:  # before this run's lock marks the folder packlm's
        check_not_foreign(run_dir)
    with run_lock(run_dir) if owns_folder else contextlib.nullcontext():
        if owns_folder and not cfg.ckpt_path and not cfg.get("overwrite_run"):
            check_fresh_folder(run_dir)  # under the lock: no fresh run slips in between
        return _fit(cfg, config, run_dir, checkpoint, init, callbacks)


def _fit(
    cfg: DictConfig,
    config: Validated,
    run_dir: Path,
    checkpoint: dict | None,
    init: dict | None,
    callbacks: Sequence[L.Callback],
) -> dict[str, float]:
    """The run itself, in its locked folder: data, model, fit, the final validation."""
    if config.train.keep_freed_memory:
        keep_freed_memory()
    if config.train.cpu_threads is not None:  # before any torch work of the run
        torch.set_num_threads(config.train.cpu_threads)
    quiet_lightning_noise()
    quiet_lightning_leaf_spec()
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = PackedDataModule.from_config(config, cfg.cache_dir)
    datamodule.prepare_data()
    datamodule.setup("fit")
    log_data_counts(datamodule)
    note = vocab_note(config, datamodule.vocab_size)
    if note and rank_zero_only.rank == 0:
        log.warning("%s", note)
    model_config = replace(config.model, vocab_size=model_vocab(config, datamodule.vocab_size))
    resume_step = None
    if checkpoint is not None:
        check_model_shape(cfg.ckpt_path, checkpoint, model_config)
        for change in changed_settings(checkpoint, config):
            log.info("resume applies a changed setting: %s", change)
        seen = (checkpoint.get("packlm_tokens_seen") or {}).get("supervised", 0)
        resume_step = (int(checkpoint.get("global_step", 0)), int(seen))
        del checkpoint
    if init is not None:
        check_init_from(cfg.init_from, init, model_config, datamodule.tokenizer, cfg.cache_dir)
    if rank_zero_only.rank == 0:  # accepted: the run's record, an earlier run's files gone
        commit(run_dir, cfg, None if resume_step is None else resume_step[0])
    run = compose(cfg, config, run_dir, datamodule, model_config, resume_step, callbacks)
    trainer, module = run.trainer, run.module
    if init is not None:
        module.load_state_dict(init["state_dict"])
        log.info("init_from: weights of %s (a new run: new optimizer and schedule)", cfg.init_from)
        del init
    if trainer.is_global_zero:
        log_model_size(module)
    start = time.perf_counter()
    with ddp_relaunch_runs_this_job(trainer):
        try:
            trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=False)
        except TrainingStopped as stopped:
            if trainer.is_global_zero:
                log.warning("%s", stopped)
            raise

        metrics = {
            k: float(v)
            for k, v in trainer.callback_metrics.items()
            if k.startswith(("val/", "train/"))
        }
        already_validated = bool(run.validated_at) and run.validated_at[-1] == trainer.global_step
        if (
            run.validates
            and config.train.validate_at_end
            and not config.trainer.fast_dev_run
            and not already_validated
        ):
            (final,) = trainer.validate(module, datamodule=datamodule, verbose=False)
            metrics.update({k: float(v) for k, v in final.items()})
    metrics["tokens/supervised"] = float(module.supervised_tokens_seen)
    if trainer.is_global_zero:
        seconds = time.perf_counter() - start
        first_step, first_tokens = resume_step or (0, 0)
        ran = Ran(
            trainer.global_step - first_step,
            module.supervised_tokens_seen - first_tokens,
            seconds,
            trainer.global_step,
            stop_reason(trainer, config.train.max_supervised_tokens),
        )
        report(summary(metrics, ran, run.last.path, run_dir, run.validates, note))
    return metrics


def report(text: str) -> None:
    """The summary through logging under Hydra, which writes it to the console and to the
    run's job.log (its last lines); printed when called without Hydra's logging (notebooks,
    tests calling `train`)."""
    if HydraConfig.initialized() and log.isEnabledFor(logging.INFO):
        log.info("%s", text)
    else:
        print(text)


def _check_strategy_fits_the_machine(strategy: Any, accelerator: Any) -> None:
    """Lightning refuses FSDP without a GPU, but only once the Trainer is built (after the
    store): said here, before any work, in the config's words."""
    if not (isinstance(strategy, str) and strategy.startswith("fsdp")):
        return
    gpu = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    if not gpu:
        where = "no CUDA GPU here" if accelerator in ("auto", "gpu", "cuda") else "a CPU run"
        raise ConfigError(
            f"trainer.strategy={strategy}: Lightning's FSDP needs CUDA GPUs, and "
            f"trainer.accelerator={accelerator} is {where}; on CPUs use trainer.strategy=ddp "
            "(gloo), e.g. trainer.accelerator=cpu trainer.devices=2"
        )


ONE_LINE = (
    ConfigError,
    SourceError,
    StoreError,
    OSError,
    TrainingDiverged,
    RunLocked,
    RunFolderTaken,
)
"""The errors `main` prints as one line (config: exit 2, the others: exit 1)."""


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> float:
    """Hydra entry point; returns `optimized_metric` (val/bpb by default) for sweepers.

    A resume (`ckpt_path=...`) is composed from the run's own overrides with the command
    line's on top (packlm/train/resume_config.py), so `python train.py ckpt_path=<ckpt>`
    resumes a run started with any overrides.
    packlm's own errors (a bad config value, a bad source, an unreadable checkpoint) print as
    one message and exit 2 (config) or 1 (data, files); HYDRA_FULL_ERROR=1 shows the traceback.
    """
    try:
        with one_line_errors(*ONE_LINE):
            if cfg.ckpt_path:  # the run's own settings, the command line's on top
                cfg = resume_config(cfg)
            metrics = train(cfg)
    except TrainingStopped as stopped:
        # rank 0 reports the signal; other DDP ranks end cleanly (a non-zero exit of a child
        # makes Lightning's process observer SIGKILL every rank)
        raise SystemExit(stopped.exit_code if rank_zero_only.rank == 0 else 0) from None
    finally:
        discard_pending()  # a refused command's config is no record of the run
    return metrics.get(cfg.optimized_metric, float("nan"))


if __name__ == "__main__":
    main()
