"""The config schema: every group as a dataclass registered in Hydra's ConfigStore.

`conf/config.yaml` starts from the `packlm_schema` node, so OmegaConf type-checks every
override at compose time (`data.window=abc` fails with the key); `validate_config` then
checks ranges and allowed values, all before any work starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from packlm.data.config import DataConfig, expand_escapes
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
class TrainerConfig:
    """The subset of `lightning.Trainer` arguments packlm exposes (passed through as is)."""

    accelerator: str = "auto"
    devices: Any = 1
    strategy: str = "auto"
    num_nodes: int = 1
    precision: str = "32-true"
    max_steps: int = 600
    max_epochs: int = -1
    val_check_interval: Any = 200
    check_val_every_n_epoch: int | None = None
    limit_val_batches: Any = 1.0
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = 1.0
    log_every_n_steps: int = 10
    num_sanity_val_steps: int = 0
    enable_progress_bar: bool = True
    deterministic: bool = False
    fast_dev_run: Any = False


@dataclass
class TrainConfig:
    """What the training run does beyond the Trainer: budgets, pictures, samples."""

    max_supervised_tokens: int | None = None
    """Stop after this many supervised targets (all ranks); sweeps compare at equal data."""
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


@dataclass
class PackLMConfig:
    data: DataSchema = field(default_factory=DataSchema)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 1337
    cache_dir: str = ".cache/packlm"
    ckpt_path: str | None = None


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
    model = ModelConfig(**_plain(cfg.model, ModelConfig, "model")).validate()
    optim = OptimConfig(**_plain(cfg.optim, OptimConfig, "optim"))
    optim = replace(optim, betas=tuple(optim.betas)).validate()
    trainer = TrainerConfig(**_plain(cfg.trainer, TrainerConfig, "trainer"))
    if trainer.precision not in PRECISIONS:
        raise ConfigError(f"trainer.precision={trainer.precision!r}: allowed {list(PRECISIONS)}")
    if trainer.accumulate_grad_batches < 1:
        raise ConfigError(
            f"trainer.accumulate_grad_batches={trainer.accumulate_grad_batches}: must be >= 1"
        )
    train = TrainConfig(**_plain(cfg.train, TrainConfig, "train"))
    if trainer.max_steps <= 0 and trainer.max_epochs <= 0 and not train.max_supervised_tokens:
        raise ConfigError(
            f"trainer.max_steps={trainer.max_steps}: with trainer.max_epochs={trainer.max_epochs} "
            "nothing ends the run; set trainer.max_steps, trainer.max_epochs or "
            "train.max_supervised_tokens"
        )
    if train.max_supervised_tokens is not None and train.max_supervised_tokens <= 0:
        raise ConfigError(
            f"train.max_supervised_tokens={train.max_supervised_tokens}: must be positive"
        )
    every = train.checkpoint_every_n_steps
    if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
        raise ConfigError(
            f"train.checkpoint_every_n_steps={every!r}: must be a positive integer or null"
        )
    return Validated(
        data=data_config(cfg, model_context=model.context_length),
        tokenizer=tokenizer_config(cfg),
        model=model,
        optim=optim,
        trainer=trainer,
        train=train,
    )


def data_config(cfg: DictConfig, model_context: int | None = None) -> DataConfig:
    """The validated `data` group of a composed config.

    `data.separator='\n\n'` typed on a command line arrives as backslash + n (Hydra does not
    expand escapes), so escapes are expanded here, once, for every command.
    """
    data = DataConfig(**_plain(cfg.data, DataConfig, "data"))
    if isinstance(data.separator, str):
        data = replace(data, separator=expand_escapes(data.separator))
    return data.validate(model_context)


def tokenizer_config(cfg: DictConfig) -> TokenizerConfig:
    """The validated `tokenizer` group of a composed config."""
    return TokenizerConfig(**_plain(cfg.tokenizer, TokenizerConfig, "tokenizer")).validate()


def _plain(node: Any, cls: type, group: str) -> dict[str, Any]:
    """The group's values; a key the schema does not know (`+trainer.foo=1`) is an error."""
    values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)
    values.pop("_target_", None)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{group}.{unknown[0]}: unknown key; allowed {sorted(known)}")
    return values
