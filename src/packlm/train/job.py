"""`python train.py`: compose the config, build data and model, fit, validate, report.

`train(cfg)` does the work and returns the final metrics, so tests and notebooks call it
directly; `main` is only the Hydra entry point (the Lightning+Hydra template's split).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import LambdaCallback, ModelCheckpoint, ProgressBar
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from packlm.callbacks import (
    AtomicCheckpointIO,
    BatchHashes,
    BatchImages,
    EpochProgressBar,
    EpochStatistics,
    FiniteTraining,
    GracefulStop,
    HParams,
    LastCheckpoint,
    ResumedSettings,
    RunProgressBar,
    SourceLosses,
    StepMetrics,
    SupervisedTokenAxis,
    SupervisedTokenBudget,
    TextSamples,
    TokenBudget,
    TrainingDiverged,
    TrainingRowText,
    TrainingStopped,
    rich_available,
)
from packlm.checkpoint.contents import read_checkpoint, run_dir_of
from packlm.checkpoint.extras import CheckpointExtras
from packlm.checkpoint.resume import (
    changed_settings,
    check_init_from,
    check_model_shape,
    check_resume,
    run_settings,
)
from packlm.config.model import ModelConfig
from packlm.config.precision import auto_precision
from packlm.config.schema import CONFIG_DIR, Validated, swept_keys, validate_config
from packlm.data.datamodule import PackedDataModule
from packlm.data.epoch.curriculum import expected_batches
from packlm.data.store.sources import SourceError
from packlm.data.store.token_store import StoreError
from packlm.errors import ConfigError, one_line_errors
from packlm.model.lit_module import LitCausalLM
from packlm.runtime.run_folder import check_writable
from packlm.train.allocator import keep_freed_memory
from packlm.train.ddp_hydra import ddp_relaunch_runs_this_job
from packlm.train.loggers import build_callbacks, build_loggers
from packlm.train.report import (
    Ran,
    log_model_size,
    quiet_lightning_leaf_spec,
    quiet_lightning_noise,
    stop_reason,
    summary,
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
    with run_lock(run_dir) if owns_folder else contextlib.nullcontext():
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
    quiet_lightning_noise()
    quiet_lightning_leaf_spec()
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = PackedDataModule.from_config(config, cfg.cache_dir)
    datamodule.prepare_data()
    datamodule.setup("fit")
    _log_data_counts(datamodule)
    vocab_note = _vocab_note(config, datamodule)
    if vocab_note and rank_zero_only.rank == 0:
        log.warning("%s", vocab_note)
    model_config = replace(config.model, vocab_size=_model_vocab(config, datamodule.vocab_size))
    resume_step = None
    if checkpoint is not None:
        check_model_shape(cfg.ckpt_path, checkpoint, model_config)
        for change in changed_settings(checkpoint, config):
            log.info("resume applies a changed setting: %s", change)
        seen = (checkpoint.get("packlm_tokens_seen") or {}).get("supervised", 0)
        resume_step = (int(checkpoint.get("global_step", 0)), int(seen))
        del checkpoint
    if init is not None:
        check_init_from(cfg.init_from, init, model_config, datamodule.tokenizer)
    validates = _has_validation(config, datamodule)
    last = LastCheckpoint(run_dir / "checkpoints", config.train.checkpoint_every_n_steps)
    budget = (
        [SupervisedTokenBudget(config.train.max_supervised_tokens)]
        if config.train.max_supervised_tokens
        else []
    )
    validated_at: list[int] = []  # global steps of in-fit validations
    callbacks = [
        LambdaCallback(on_validation_end=lambda tr, _: validated_at.append(tr.global_step)),
        *build_callbacks(cfg.callbacks, run_dir, validates),
        *budget,  # before LastCheckpoint, which saves on the step the budget stops at
        FiniteTraining(last),  # before LastCheckpoint: a NaN loss stops before any save
        last,
        GracefulStop(last),  # after LastCheckpoint: one write when both want the same step
        CheckpointExtras(
            datamodule.tokenizer,
            asdict(config.data),
            {**run_settings(config), "tokenizer.vocab_size": datamodule.vocab_size},  # the real
        ),
        ResumedSettings(config.optim),
        StepMetrics(),  # before SupervisedTokenAxis, which reads the train/loss it logs
        SupervisedTokenAxis(config.trainer.log_every_n_steps),
        SourceLosses(datamodule.tokenizer, bos=config.data.bos),
        HParams.of_run(config, datamodule, tuple(sorted(swept_keys()))),
        EpochStatistics(datamodule, images=config.train.log_batch_images),
        *callbacks,
    ]
    batch_hashes = BatchHashes.from_env()
    if batch_hashes is not None:
        callbacks.append(batch_hashes)
    if config.train.log_batch_images:
        callbacks += [BatchImages(), TrainingRowText(datamodule.tokenizer)]
    if config.train.sample_prompt:
        callbacks.append(
            TextSamples(
                datamodule.tokenizer, config.train.sample_prompt, config.train.sample_tokens
            )
        )

    own_bar = any(isinstance(c, ProgressBar) for c in callbacks)  # a user's own bar wins
    bar = None
    if config.trainer.enable_progress_bar and not own_bar:
        bar = EpochProgressBar() if rich_available() else RunProgressBar()
        callbacks.append(bar)
    trainer_kwargs = config.trainer.trainer_kwargs()
    if config.trainer.precision == "auto":
        chosen = auto_precision(config.trainer.accelerator)
        log.info("trainer.precision=auto: %s on this machine; set it to choose", chosen)
    if config.train.max_supervised_tokens:
        trainer_kwargs["max_steps"] = -1  # the token budget decides
    if not validates:
        trainer_kwargs["limit_val_batches"] = 0
    if not any(isinstance(c, ModelCheckpoint) for c in callbacks):  # callbacks=none
        trainer_kwargs.setdefault("enable_checkpointing", False)  # no Lightning default one
    loggers = build_loggers(cfg.logger, run_dir, resume_step)
    trainer = L.Trainer(
        **trainer_kwargs,
        logger=loggers or False,
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],
        use_distributed_sampler=False,  # the DataModule shards the epoch plan itself
        reload_dataloaders_every_n_epochs=1,  # each epoch has its own plan (and length)
        default_root_dir=str(run_dir),
    )
    if bar is not None and config.train.max_supervised_tokens:  # the bar ends with the budget
        batches_for = _expected_batches(datamodule, trainer.world_size)
        bar.budget = TokenBudget(config.train.max_supervised_tokens, batches_for)
    module = LitCausalLM(model=model_config, optim=_schedule_horizon(config, datamodule, trainer))
    module.set_token_byte_lengths(datamodule.token_byte_lengths)  # for val/bpb
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
        already_validated = bool(validated_at) and validated_at[-1] == trainer.global_step
        if (
            validates
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
        print(summary(metrics, ran, last.path, run_dir, validates, vocab_note))
    return metrics


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


def _model_vocab(config: Validated, tokenizer_vocab: int) -> int:
    """The embedding's rows: the tokenizer's vocabulary. model.vocab_size at its default means
    just that; set to fewer rows than the tokenizer has ids it is refused (it used to be
    replaced without a word)."""
    given = config.model.vocab_size
    if given != ModelConfig.vocab_size and given < tokenizer_vocab:
        raise ConfigError(
            f"model.vocab_size={given}: smaller than the tokenizer's vocabulary "
            f"({tokenizer_vocab} entries, tokenizer.vocab_size={config.tokenizer.vocab_size}): "
            "the embedding needs a row for every id; leave model.vocab_size at its default "
            "(the tokenizer's size) or set it to at least that"
        )
    return tokenizer_vocab


def _vocab_note(config: Validated, datamodule: PackedDataModule) -> str | None:
    """When the corpus gave fewer entries than tokenizer.vocab_size asked for: say so (a
    vocabulary sweep's jobs above that size are the same run)."""
    asked, real = config.tokenizer.vocab_size, datamodule.vocab_size
    if config.tokenizer.path is not None or real >= asked:
        return None
    return (
        f"tokenizer.vocab_size={asked}: the corpus gave only {real} entries (no pair left to "
        f"merge); the run used {real}, as its hparams and checkpoint record"
    )


def _has_validation(config: Validated, datamodule: PackedDataModule) -> bool:
    """Validation runs unless the val split is empty or trainer.limit_val_batches=0."""
    if config.trainer.limit_val_batches in (0, 0.0):
        return False
    if datamodule.store("val").n_docs == 0:
        log.info("no validation: the val split has no documents (data.val_fraction=0)")
        return False
    return True


def _schedule_horizon(config: Validated, datamodule: PackedDataModule, trainer: L.Trainer):
    """The cosine schedule's length in optimizer steps: optim.max_steps when given; under a
    token budget, the steps that budget takes; else None, and the module uses the Trainer's
    estimate (max_steps, or epochs x batches / accumulation)."""
    optim = config.optim
    if optim.max_steps is not None or not config.train.max_supervised_tokens:
        return optim
    batches = _expected_batches(datamodule, trainer.world_size)(config.train.max_supervised_tokens)
    steps = math.ceil(batches / config.trainer.accumulate_grad_batches)
    return replace(optim, max_steps=max(1, steps))


def _expected_batches(datamodule: PackedDataModule, world: int):
    """tokens -> the global batches expected to train that many supervised targets (the
    schedule's horizon and the progress bar's total under a token budget)."""
    rates = [  # supervised tokens per global batch of each curriculum phase (one without)
        datamodule.supervised_tokens_per_batch(p) * world for p in range(len(datamodule.phases))
    ]
    return lambda tokens: expected_batches(datamodule.phases, rates, tokens)


def _drop_order(item: tuple[str, int]) -> int:
    order = ("empty", "invalid_utf8", "binary", "special_files", "duplicate_of_train")
    return order.index(item[0]) if item[0] in order else len(order)


@rank_zero_only
def _log_data_counts(datamodule: PackedDataModule) -> None:
    """What reading the sources dropped or changed (counted at build time, in the manifests)."""
    for split, manifest in datamodule.prepared.manifests.items():
        counts = manifest.get("counts", {})
        dropped = counts.get("dropped", {})
        log.info(
            "data %s: %d documents, %d tokens; dropped %s; replaced invalid UTF-8 in %d",
            split,
            counts.get("documents", 0),
            counts.get("tokens", 0),
            ", ".join(f"{v} {k}" for k, v in sorted(dropped.items(), key=_drop_order)) or "none",
            counts.get("replaced_invalid_utf8", 0),
        )


ONE_LINE = (ConfigError, SourceError, StoreError, OSError, TrainingDiverged, RunLocked)
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
    return metrics.get(cfg.optimized_metric, float("nan"))


if __name__ == "__main__":
    main()
