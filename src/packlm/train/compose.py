"""Composing a run: the callbacks, the Trainer and the module that `train(cfg)` then runs.

1. `compose(...)`: the run's callbacks in their order (the order matters: budgets before the
   last-checkpoint writer, which saves on the step a budget stops at; the NaN guard before
   it), the progress bar, the loggers, the Trainer's arguments, the Trainer, the module.
2. The numbers the config leaves to the data: the embedding's rows (`model_vocab`), whether
   the run validates (`has_validation`), the cosine's length under a token budget.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import LambdaCallback, ModelCheckpoint, ProgressBar
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
    MixtureChart,
    ProgressLines,
    ResumedSettings,
    RunProgressBar,
    SourceLosses,
    SourceTable,
    StepMetrics,
    SupervisedTokenAxis,
    SupervisedTokenBudget,
    TextSamples,
    TokenBudget,
    TrainingRowText,
    rich_available,
)
from packlm.checkpoint.extras import CheckpointExtras
from packlm.checkpoint.resume import run_settings
from packlm.config.compile_choice import auto_compile
from packlm.config.model import ModelConfig, OptimConfig
from packlm.config.precision import auto_precision
from packlm.config.schema import Validated, swept_keys
from packlm.data.datamodule import PackedDataModule
from packlm.data.epoch.curriculum import expected_batches
from packlm.errors import ConfigError
from packlm.model.lit_module import LitCausalLM
from packlm.model.schedule import time_limit
from packlm.train.loggers import build_callbacks, build_loggers

log = logging.getLogger(__name__)


@dataclass
class Composed:
    """What `train(cfg)` runs: the Trainer and module, and what its report reads back."""

    trainer: L.Trainer
    module: LitCausalLM
    last: LastCheckpoint
    validates: bool
    validated_at: list[int] = field(default_factory=list)  # global steps of in-fit validations


def compose(
    cfg: DictConfig,
    config: Validated,
    run_dir: Path,
    datamodule: PackedDataModule,
    model_config: ModelConfig,
    resume_step: tuple[int, int] | None,
    extra_callbacks: Sequence[L.Callback] = (),
) -> Composed:
    """The Trainer (callbacks, loggers, arguments) and the module for one run."""
    validates = has_validation(config, datamodule)
    last = LastCheckpoint(run_dir / "checkpoints", config.train.checkpoint_every_n_steps)
    validated_at: list[int] = []
    budget = (
        [SupervisedTokenBudget(config.train.max_supervised_tokens)]
        if config.train.max_supervised_tokens
        else []
    )
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
            str(Path(cfg.cache_dir).expanduser().resolve()),
        ),
        ResumedSettings(config.optim),
        StepMetrics(),  # before SupervisedTokenAxis, which reads the train/loss it logs
        SupervisedTokenAxis(config.trainer.log_every_n_steps),
        SourceLosses(datamodule.tokenizer, bos=config.data.bos),
        MixtureChart(),
        SourceTable(),
        HParams.of_run(config, datamodule, tuple(sorted(swept_keys()))),
        EpochStatistics(datamodule, images=config.train.log_batch_images),
        *extra_callbacks,
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
    terminal = has_terminal()  # without one (a log file) the bar draws nothing: lines
    bar = None
    if config.trainer.enable_progress_bar and not own_bar and terminal:
        bar = EpochProgressBar() if rich_available() else RunProgressBar()
        callbacks.append(bar)
    train = config.train
    lines = ProgressLines(
        train.progress_every_seconds, train.progress_every_n_steps, lines=not terminal
    )
    callbacks.append(lines)
    trainer_kwargs = config.trainer.trainer_kwargs()
    if config.trainer.precision == "auto":
        chosen = auto_precision(config.trainer.accelerator)
        log.info("trainer.precision=auto: %s on this machine; set it to choose", chosen)
    if not terminal and not own_bar:
        trainer_kwargs["enable_progress_bar"] = False  # the progress lines instead
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
    if config.train.max_supervised_tokens:  # the bar and the lines end with the budget
        batches_for = _expected_batches(
            datamodule, trainer.world_size, trainer.accumulate_grad_batches
        )
        for shown in (bar, lines):
            if shown is not None:
                shown.budget = TokenBudget(config.train.max_supervised_tokens, batches_for)
    optim = _schedule_horizon(config, datamodule, trainer)
    ignored = optim.ignored(time_limit(trainer) is not None)
    if ignored:
        log.warning("these settings have no effect in this run: %s", "; ".join(ignored))
    module = LitCausalLM(model=model_config, optim=optim)
    module.set_token_byte_lengths(datamodule.token_byte_lengths)  # for val/bpb
    if model_config.compile == "auto":  # decided on this machine, at every start
        steps = _planned_steps(config, trainer, optim, resume_step, datamodule)
        timer = time_limit(trainer)
        minutes = None if timer is None else timer.time_remaining() / 60
        detect_anomaly = bool(trainer_kwargs.get("detect_anomaly"))
        on, why = auto_compile(config.trainer.accelerator, steps, minutes, detect_anomaly)
        log.info("model.compile=auto: %s (%s)", "on" if on else "off", why)
        module.use_compiled_views(on, fallback=True)
    return Composed(trainer, module, last, validates, validated_at)


def has_terminal() -> bool:
    """Is stderr, where the bar draws, a terminal? (Not under SLURM, nohup, CI, `> log`.)"""
    return sys.stderr.isatty()


def model_vocab(config: Validated, tokenizer_vocab: int) -> int:
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


def _schedule_horizon(config: Validated, datamodule: PackedDataModule, trainer: L.Trainer):
    """The cosine schedule's length in optimizer steps: optim.max_steps when given; under a
    token budget, the steps that budget takes; else None, and the module uses the Trainer's
    estimate (max_steps, or epochs x batches / accumulation)."""
    optim = config.optim
    if optim.max_steps is not None or not config.train.max_supervised_tokens:
        return optim
    batches = _expected_batches(datamodule, trainer.world_size, trainer.accumulate_grad_batches)(
        config.train.max_supervised_tokens
    )
    steps = math.ceil(batches / config.trainer.accumulate_grad_batches)
    return replace(optim, max_steps=max(1, steps))


def _planned_steps(
    config: Validated,
    trainer: L.Trainer,
    optim: OptimConfig,
    resume_step: tuple[int, int] | None,
    datamodule: PackedDataModule,
) -> int | None:
    """The optimizer steps this start plans: the Trainer's max_steps (fast_dev_run's too), a
    token budget's expected steps or trainer.max_epochs' (`_epoch_steps` each), less those a
    resume has done; None: no step limit (the clock ends the run, or a mixture's epochs)."""
    total = trainer.max_steps if trainer.max_steps >= 0 else None
    if total is None and config.train.max_supervised_tokens:
        total = optim.max_steps
    if total is None and trainer.max_epochs is not None and trainer.max_epochs > 0:
        per_epoch = _epoch_steps(datamodule, trainer)  # a 1-epoch run said "no step limit"
        total = None if per_epoch is None else per_epoch * trainer.max_epochs
    if total is None:
        return None
    return max(0, total - (resume_step[0] if resume_step else 0))


def _epoch_steps(datamodule: PackedDataModule, trainer: L.Trainer) -> int | None:
    """About the optimizer steps of one epoch: epoch 0's plan in global batches (the plan
    statistics the epoch logs anyway), under trainer.limit_train_batches; None under a
    mixture by share, whose epochs are passes of its sources."""
    if datamodule.mixture:
        return None
    samples = datamodule.plan_statistics(0)["samples"]
    batches = samples // (datamodule.data.batch_size * trainer.world_size)
    limit = trainer.limit_train_batches
    batches = min(batches, limit) if isinstance(limit, int) else int(batches * limit)
    return batches // trainer.accumulate_grad_batches


def _expected_batches(datamodule: PackedDataModule, world: int, accumulate: int = 1):
    """tokens -> the global batches expected to train that many supervised targets (the
    schedule's horizon and the progress bar's total under a token budget)."""
    if datamodule.mixture:
        rows = datamodule.data.batch_size * world
        return datamodule.mixture_rates(rows, accumulate).batches
    rates = [  # supervised tokens per global batch of each curriculum phase (one without)
        datamodule.supervised_tokens_per_batch(p) * world for p in range(len(datamodule.phases))
    ]
    return lambda tokens: expected_batches(datamodule.phases, rates, tokens)


def has_validation(config: Validated, datamodule: PackedDataModule) -> bool:
    """Validation runs unless the val split is empty or trainer.limit_val_batches=0."""
    if config.trainer.limit_val_batches in (0, 0.0):
        return False
    if datamodule.store("val").n_docs == 0:
        log.info("no validation: the val split has no documents (data.val_fraction=0)")
        return False
    return True
