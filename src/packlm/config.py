"""The config schema: every group as a dataclass registered in Hydra's ConfigStore.

`conf/config.yaml` starts from the `packlm_schema` node, so OmegaConf type-checks every
override at compose time (`data.window=abc` fails with the key); `validate_config` then
checks ranges and allowed values, all before any work starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from packlm.config_group import ConfigGroup, check_choice
from packlm.data.config import DataConfig
from packlm.data.store.cache import DEFAULT_CACHE_DIR
from packlm.errors import ConfigError
from packlm.model.config import ModelConfig, OptimConfig
from packlm.tokenizer.config import TokenizerConfig

# conf/ at the top of the project (src/packlm/config.py -> ../../conf); PACKLM_CONFIG_DIR overrides.
CONFIG_DIR = str(
    Path(os.environ.get("PACKLM_CONFIG_DIR", Path(__file__).resolve().parents[2] / "conf"))
)

PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "64-true")


@dataclass
class DataSchema(DataConfig):
    _target_: str = "packlm.data.datamodule.PackedDataModule"


@dataclass
class TrainerConfig(ConfigGroup):
    """The `lightning.Trainer` arguments packlm exposes, passed through as they are."""

    group: ClassVar[str] = "trainer"

    accelerator: str = "auto"
    """cpu, gpu, mps, auto."""
    devices: Any = 1
    """Devices per node (an int, a list of ids, or "auto")."""
    strategy: str = "auto"
    """auto, ddp, ddp_spawn, ... (ddp on CPU: `trainer.accelerator=cpu trainer.devices=2`)."""
    num_nodes: int = 1
    """Nodes of a multi-node run."""
    precision: str = "32-true"
    """32-true, bf16-mixed, 16-mixed, bf16-true, 64-true."""
    max_steps: int = 600
    """Optimizer steps of the run (-1: no limit; see train.max_supervised_tokens)."""
    max_epochs: int = -1
    """Epochs of the run (-1: no limit)."""
    val_check_interval: Any = 200
    """Training batches between validations (or a fraction of an epoch)."""
    check_val_every_n_epoch: int | None = None
    """Validate every N epochs instead (null: by val_check_interval)."""
    limit_val_batches: Any = 1.0
    """Validation batches per validation (a fraction or a count)."""
    accumulate_grad_batches: int = 1
    """Micro-batches per optimizer step; the loss stays exactly sum CE / N of the step."""
    gradient_clip_val: float | None = 1.0
    """Clip the gradient norm to this value (null: no clipping)."""
    log_every_n_steps: int = 10
    """Write training curves every N optimizer steps."""
    num_sanity_val_steps: int = 0
    """Validation batches run before training as a check."""
    enable_progress_bar: bool = True
    """Show the progress bar."""
    deterministic: bool = False
    """Deterministic algorithms only (slower)."""
    fast_dev_run: Any = False
    """Run N batches (true: 1) of training and validation as a smoke test."""

    def validate(self) -> TrainerConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        check_choice("trainer.precision", self.precision, PRECISIONS)
        if self.accumulate_grad_batches < 1:
            raise ConfigError(
                f"trainer.accumulate_grad_batches={self.accumulate_grad_batches}: must be >= 1"
            )
        return self


@dataclass
class TrainConfig(ConfigGroup):
    """What the training run does beyond the Trainer: budgets, pictures, samples."""

    group: ClassVar[str] = "train"

    max_supervised_tokens: int | None = None
    """Stop after this many supervised targets (all ranks) instead of trainer.max_steps;
    sweeps compare at equal data (the cosine schedule follows the budget)."""
    log_batch_images: bool = True
    """Log one batch's attention mask and segment/label layout as images at the start."""
    sample_prompt: str = "def "
    """Prompt of the text samples generated after each validation ('' to disable)."""
    sample_tokens: int = 64
    """New tokens per generated text sample."""
    validate_at_end: bool = True
    """Run a last validation on the final weights and print val/loss and val/bpb."""
    checkpoint_every_n_steps: int | None = 100
    """Write checkpoints/last.ckpt every this many optimizer steps (and at the end, and on
    SIGTERM/Ctrl-C); a SIGKILL loses at most this many steps. null: only at the end/stop."""

    def validate(self) -> TrainConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        if self.max_supervised_tokens is not None and self.max_supervised_tokens <= 0:
            raise ConfigError(
                f"train.max_supervised_tokens={self.max_supervised_tokens}: must be positive"
            )
        every = self.checkpoint_every_n_steps
        if every is not None and (
            not isinstance(every, int) or isinstance(every, bool) or every < 1
        ):
            raise ConfigError(
                f"train.checkpoint_every_n_steps={every!r}: must be a positive integer or null"
            )
        return self


@dataclass
class PackLMConfig:
    """The whole config of `python train.py` (and of prepare, stats)."""

    data: DataSchema = field(default_factory=DataSchema)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 1337
    """Seeds the model's initialization and, through data.seed, the epoch plans."""
    cache_dir: str = "${oc.env:PACKLM_CACHE," + DEFAULT_CACHE_DIR + "}"
    """Tokenizers and token stores, keyed by fingerprint, shared by all runs and sweeps
    (the environment variable PACKLM_CACHE overrides the default)."""
    ckpt_path: str | None = None
    """Resume from this checkpoint (outputs/<date>/<time>/checkpoints/last.ckpt) into its run."""


def register_configs() -> None:
    """Make `packlm_schema` available to the defaults list of conf/config.yaml."""
    ConfigStore.instance().store(name="packlm_schema", node=PackLMConfig)


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


def validate_config(cfg: DictConfig) -> Validated:
    """Every group checked, cross-group constraints too; raises ConfigError naming the key."""
    model = ModelConfig.from_mapping(cfg.model)
    trainer = TrainerConfig.from_mapping(cfg.trainer)
    train = TrainConfig.from_mapping(cfg.train)
    if trainer.max_steps <= 0 and trainer.max_epochs <= 0 and not train.max_supervised_tokens:
        raise ConfigError(
            f"trainer.max_steps={trainer.max_steps}: with trainer.max_epochs={trainer.max_epochs} "
            "nothing ends the run; set trainer.max_steps, trainer.max_epochs or "
            "train.max_supervised_tokens"
        )
    return Validated(
        data=DataConfig.from_mapping(cfg.data).validate(model_context=model.context_length),
        tokenizer=TokenizerConfig.from_mapping(cfg.tokenizer),
        model=model,
        optim=OptimConfig.from_mapping(cfg.optim),
        trainer=trainer,
        train=train,
    )
