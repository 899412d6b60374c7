"""The config schema: every group as a dataclass registered in Hydra's ConfigStore.

`conf/config.yaml` starts from the `packlm_schema` node, so OmegaConf type-checks every
override at compose time (`data.window=abc` fails with the key); `validate_config` then
checks ranges and allowed values, all before any work starts.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from packlm.cache import DEFAULT_CACHE_DIR
from packlm.config.data import DataConfig
from packlm.config.group import ConfigGroup
from packlm.config.model import ModelConfig, OptimConfig, check_strategy
from packlm.config.tokenizer import TokenizerConfig
from packlm.config.trainer import SIGNATURE_CHECKS, TrainerConfig, TrainerSchema
from packlm.errors import ConfigError
from packlm.runtime.run_records import pending_subdir

# conf/ at the top of the project (src/packlm/config/schema.py -> ../../../conf); PACKLM_CONFIG_DIR overrides.
CONFIG_DIR = str(
    Path(os.environ.get("PACKLM_CONFIG_DIR", Path(__file__).resolve().parents[3] / "conf"))
)


@dataclass
class DataSchema(DataConfig):
    _target_: str = "packlm.data.datamodule.PackedDataModule"


@dataclass
class TrainConfig(ConfigGroup):
    """What the training run does beyond the Trainer: budgets, pictures, samples."""

    group: ClassVar[str] = "train"

    max_supervised_tokens: int | None = None
    """Stop after this many supervised targets (all ranks) instead of trainer.max_steps;
    sweeps compare at equal data (the cosine schedule follows the budget)."""
    log_batch_images: bool = True
    """Log the first batch's attention mask (busiest row), layout and decoded row, and each
    epoch's coverage image."""
    sample_prompt: str = "def "
    """Prompt of the text samples generated after each validation ('' to disable)."""
    sample_tokens: int = 64
    """New tokens per generated text sample."""
    validate_at_end: bool = True
    """Run a last validation on the final weights and print val/loss and val/bpb."""
    keep_freed_memory: bool = False
    """Keep the memory a step frees for the next step instead of returning it to the OS
    (glibc's malloc thresholds, for the whole process; packlm/train/allocator.py): 10-15% of a
    CPU step was page faults. The same from the shell: MALLOC_MMAP_THRESHOLD_=33554432
    MALLOC_TRIM_THRESHOLD_=1073741824."""
    checkpoint_every_n_steps: int | None = 100
    """Write checkpoints/last.ckpt every this many optimizer steps (and at the end, and on
    SIGTERM/Ctrl-C); a SIGKILL loses at most this many steps. null: only at the end/stop."""
    progress_every_seconds: float | None = 30.0
    """Without a terminal (stderr to a file: SLURM, nohup, CI) print a progress line (step/total,
    epoch, loss, tokens/s, supervised tokens, elapsed, ETA) every this many seconds; in a
    terminal the bar shows it instead. null: not by time."""
    progress_every_n_steps: int | None = None
    """Also print that line every this many optimizer steps (null: not by steps)."""
    cpu_threads: int | None = None
    """torch's CPU threads for the run's math (torch.set_num_threads); null: torch's default,
    one per core. On an idle machine the default is fastest even for experiment=chat's 0.5M
    parameters (two threads: 400 steps in 15 s against 23-26 s on one); on cores other
    processes share, threads that wait on each other made a step ~9x slower (2 cores, load 5:
    1.2 s against 0.13 s on one thread), so set 1 there."""

    def validate(self) -> TrainConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        if self.max_supervised_tokens is not None and self.max_supervised_tokens <= 0:
            raise ConfigError(
                f"train.max_supervised_tokens={self.max_supervised_tokens}: must be positive"
            )
        tokens = self.sample_tokens
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ConfigError(
                f"train.sample_tokens={tokens!r}: must be a positive integer "
                "(train.sample_prompt='' turns the samples off)"
            )
        every = self.checkpoint_every_n_steps
        if every is not None and (
            not isinstance(every, int) or isinstance(every, bool) or every < 1
        ):
            raise ConfigError(
                f"train.checkpoint_every_n_steps={every!r}: must be a positive integer or null"
            )
        seconds = self.progress_every_seconds
        if seconds is not None and (isinstance(seconds, bool) or not seconds > 0):
            raise ConfigError(f"train.progress_every_seconds={seconds!r}: must be positive or null")
        steps = self.progress_every_n_steps
        if steps is not None and (
            not isinstance(steps, int) or isinstance(steps, bool) or steps < 1
        ):
            raise ConfigError(
                f"train.progress_every_n_steps={steps!r}: must be a positive integer or null"
            )
        threads = self.cpu_threads
        if threads is not None and (
            not isinstance(threads, int) or isinstance(threads, bool) or threads < 1
        ):
            raise ConfigError(f"train.cpu_threads={threads!r}: must be a positive integer or null")
        return self


@dataclass
class PackLMConfig:
    """The whole config of `python train.py` (and of prepare, stats)."""

    data: DataSchema = field(default_factory=DataSchema)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerSchema = field(default_factory=TrainerSchema)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 1337
    """Seeds the model's initialization and, through data.seed, the epoch plans."""
    cache_dir: str = "${oc.env:PACKLM_CACHE," + DEFAULT_CACHE_DIR + "}"
    """Tokenizers and token stores, keyed by fingerprint, shared by all runs and sweeps
    (the environment variable PACKLM_CACHE overrides the default)."""
    ckpt_path: str | None = None
    """Resume from this checkpoint (outputs/<date>/<time>/checkpoints/last.ckpt) into its run:
    model, optimizer, schedule and the exact next batch (docs/training.md: resume)."""
    init_from: str | None = None
    """Start a new run from this checkpoint's weights only (new optimizer, schedule, data
    position), like nanoGPT's init_from; the tokenizer must be the checkpoint's."""
    overwrite_run: bool = False
    """Let a fresh run replace the run in its folder (hydra.run.dir reused, the same command
    typed twice): its checkpoints, TensorBoard and CSV logs and .hydra/ records are deleted
    once the new run is accepted. false: refused in one line naming the resume command."""
    optimized_metric: str = "val/bpb"
    """What `main` returns to a sweeper (val/bpb compares windows and tokenizers)."""
    logger: Any = None
    """Loggers by name, each {_target_: ..., ...} (the `logger` group: tensorboard, csv,
    many, wandb); save_dir is the run directory."""
    callbacks: Any = None
    """Extra Lightning callbacks by name, each {_target_: ..., ...} (the `callbacks` group;
    add one with +callbacks.<name>._target_=...)."""


OPTIMIZED_METRICS = ("val/bpb", "val/loss", "val/ppl", "train/loss")


def register_configs() -> None:
    """Make `packlm_schema` available to conf/config.yaml, and the resolvers it uses."""
    ConfigStore.instance().store(name="packlm_schema", node=PackLMConfig)
    OmegaConf.register_new_resolver("packlm.run_dir", _run_dir, replace=True)
    OmegaConf.register_new_resolver("packlm.output_subdir", _output_subdir, replace=True)
    OmegaConf.register_new_resolver("packlm.sweep_subdir", sweep_subdir, replace=True)
    OmegaConf.register_new_resolver(
        "packlm.project_dir", lambda: str(Path(CONFIG_DIR).parent), replace=True
    )


def _run_dir(ckpt_path: str | None, fresh: str) -> str:
    """hydra.run.dir: a resume writes into the run its checkpoint belongs to (no new folder)."""
    if not ckpt_path or not Path(ckpt_path).is_file():  # a missing file is named by validation
        return fresh
    parent = Path(ckpt_path).resolve().parent
    return str(parent.parent if parent.name == "checkpoints" else parent)


def _output_subdir(ckpt_path: str | None = None) -> str | None:
    """Where Hydra writes the composed config: a pending folder, which train() makes the run's
    .hydra/ (a fresh run) or .hydra/resume-<time>/ (a resume) only once the run is accepted
    (packlm.runtime.run_records), so a refused command leaves no record a later one reads."""
    return pending_subdir()


SWEEP_SYNTAX = re.compile(r"^[^=]+=(?![\[{'\"])(?:.*,.*|(?:range|choice|interval|glob)\(.*)$")
NOT_IN_NAMES = ("cache_dir", "ckpt_path", "init_from", "data.sources", "data.val_sources")


def swept_keys() -> set[str]:
    """The keys a Hydra sweep varies: the overrides written as a sweep (a,b / range(...), not
    a list value [a,b]) and a sweeper's own params; empty outside a sweep."""
    if not HydraConfig.initialized():
        return set()
    hydra = HydraConfig.get()
    varied = {a.split("=", 1)[0] for a in _sweep_overrides(hydra) if SWEEP_SYNTAX.match(a)}
    params = OmegaConf.select(hydra, "sweeper.params", default=None) or {}
    return varied | set(params.keys())


def _sweep_overrides(hydra: DictConfig) -> list[str]:
    """The overrides the sweep was started with: the sweep's own record, which Hydra writes
    to `<sweep dir>/multirun.yaml` before it launches a job (a job a launcher runs in another
    process, joblib's or submitit's, has another command line), else this command line."""
    record = Path(str(OmegaConf.select(hydra, "sweep.dir", default=""))) / "multirun.yaml"
    if hydra.mode == RunMode.MULTIRUN and record.is_file():
        task = OmegaConf.select(OmegaConf.load(record), "hydra.overrides.task", default=None)
        if task is not None:
            return [str(a).lstrip("+~") for a in task]
    return [a.lstrip("+~") for a in sys.argv[1:]]


def sweep_subdir() -> str:
    """hydra.sweep.subdir: `<job>_<what the sweep varies>`, e.g. 3_data.stride=64,data.window=128.

    The varied keys are the command-line overrides written as a sweep (a,b / range(...)) and
    a sweeper's own params; paths, seeds and the cache never make a name. Without any, the
    job's other overrides name it.
    """
    hydra = HydraConfig.get()
    varied = swept_keys()
    pairs = [o.lstrip("+~").split("=", 1) for o in hydra.overrides.task if "=" in o]
    named = [(k, v) for k, v in pairs if k in varied] or [
        (k, v) for k, v in pairs if not k.startswith(NOT_IN_NAMES) and not k.endswith("seed")
    ]
    name = ",".join(f"{k}={v}" for k, v in named) or "defaults"
    return f"{hydra.job.num}_" + re.sub(r"[^A-Za-z0-9_.,=+-]+", "_", name)[:200]


register_configs()


@dataclass
class Validated:
    """The composed config as validated dataclasses (what train/prepare/stats use)."""

    data: DataConfig
    tokenizer: TokenizerConfig
    model: ModelConfig
    optim: OptimConfig
    trainer: TrainerConfig
    train: TrainConfig


def validate_config(cfg: DictConfig, lightning: bool = True) -> Validated:
    """Every group checked, cross-group constraints too; raises ConfigError naming the key.
    `lightning=False`: without the checks against the Trainer's signature, which import
    Lightning (the precheck of `python train.py`; the run makes them)."""
    model = ModelConfig.from_mapping(cfg.model)
    checks = SIGNATURE_CHECKS.set(lightning)
    try:
        trainer = TrainerSchema.from_mapping(cfg.trainer)
    finally:
        SIGNATURE_CHECKS.reset(checks)
    train = TrainConfig.from_mapping(cfg.train)
    if (
        trainer.max_steps <= 0
        and trainer.max_epochs <= 0
        and trainer.max_time is None
        and not train.max_supervised_tokens
    ):
        raise ConfigError(
            f"trainer.max_steps={trainer.max_steps}: with trainer.max_epochs={trainer.max_epochs} "
            "nothing ends the run; set trainer.max_steps, trainer.max_epochs, trainer.max_time "
            "or train.max_supervised_tokens"
        )
    _check_top_level(cfg)
    tokenizer = TokenizerConfig.from_mapping(cfg.tokenizer)
    explicit = model.vocab_size != ModelConfig.vocab_size  # the default: the tokenizer's size
    if explicit and tokenizer.path is None and model.vocab_size < tokenizer.vocab_size:
        raise ConfigError(
            f"model.vocab_size={model.vocab_size}: smaller than tokenizer.vocab_size="
            f"{tokenizer.vocab_size} (the embedding needs a row for every id); leave "
            "model.vocab_size at its default (the tokenizer's size) or set it to at least that"
        )
    return Validated(
        data=DataConfig.from_mapping(cfg.data).validate(model_context=model.context_length),
        tokenizer=tokenizer,
        model=model,
        optim=check_strategy(OptimConfig.from_mapping(cfg.optim), trainer.strategy),
        trainer=trainer,
        train=train,
    )


def _check_top_level(cfg: DictConfig) -> None:
    """The keys at the top of conf/config.yaml, named when wrong."""
    seed = cfg.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed={seed!r}: must be an integer in [0, 2**32)")
    metric = cfg.get("optimized_metric")
    if metric not in OPTIMIZED_METRICS:
        raise ConfigError(f"optimized_metric={metric!r}: allowed {list(OPTIMIZED_METRICS)}")
    if cfg.get("ckpt_path") and cfg.get("init_from"):
        raise ConfigError(
            "ckpt_path and init_from are both set: ckpt_path resumes a run, init_from starts a "
            "new one from its weights; give one"
        )
    for key in ("ckpt_path", "init_from"):
        path = cfg.get(key)
        if path and not Path(path).is_file():
            what = "a directory, not a checkpoint" if Path(path).is_dir() else "no such checkpoint"
            raise ConfigError(f"{key}={path}: {what}")
    for group in ("logger", "callbacks"):
        for name, node in (cfg.get(group) or {}).items():
            if node is not None and "_target_" not in node:
                raise ConfigError(f"{group}.{name}: needs a _target_ (the class to build)")
