"""The `model` and `optim` config groups as dataclasses, validated before any work starts.

The defaults give a ~1M-parameter model (plus embeddings) that trains in minutes on two
CPU cores; scale n_layer / n_embd / context_length up on a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from packlm.errors import ConfigError

ATTENTION_BACKENDS = ("auto", "sdpa", "flex")


@dataclass
class ModelConfig:
    vocab_size: int = 4096
    """Rows of the token embedding; must cover every id the tokenizer emits (PAD included)."""
    context_length: int = 256
    """The longest window the model is meant for (data.window must not exceed it)."""
    n_layer: int = 4
    """Number of transformer blocks."""
    n_head: int = 4
    """Attention heads per block; n_embd / n_head is the head width (even, for RoPE)."""
    n_embd: int = 128
    """Width of the residual stream."""
    mlp_ratio: float = 8 / 3
    """SwiGLU hidden width = mlp_ratio * n_embd, rounded up to a multiple of 32 (8/3 keeps
    the parameter count of a 4x GELU MLP)."""
    dropout: float = 0.0
    """Dropout on embeddings and residual branches (not on attention probabilities, so all
    attention backends compute the same function)."""
    tie_embeddings: bool = True
    """Share the token embedding with the output head."""
    rope_base: float = 10000.0
    """Base of the rotary position embedding frequencies."""
    attention: str = "auto"
    """auto (FlexAttention on CUDA, SDPA elsewhere), sdpa (dense mask), flex (FlexAttention;
    compiled on CUDA; on CPU torch only has a slow forward-only reference, for tests)."""

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_hidden(self) -> int:
        return 32 * -(-int(round(self.mlp_ratio * self.n_embd)) // 32)

    def validate(self) -> ModelConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        for key in ("vocab_size", "context_length", "n_layer", "n_head", "n_embd"):
            _positive(f"model.{key}", getattr(self, key))
        if self.n_embd % self.n_head != 0:
            raise ConfigError(
                f"model.n_embd={self.n_embd}: must be divisible by model.n_head={self.n_head}"
            )
        if self.head_dim % 2 != 0:
            raise ConfigError(
                f"model.n_head={self.n_head}: head width n_embd/n_head={self.head_dim} must be even (RoPE)"
            )
        if not isinstance(self.mlp_ratio, (int, float)) or self.mlp_ratio <= 0:
            raise ConfigError(f"model.mlp_ratio={self.mlp_ratio!r}: must be a positive number")
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout!r}: must be in [0, 1)")
        if not isinstance(self.rope_base, (int, float)) or self.rope_base <= 1.0:
            raise ConfigError(f"model.rope_base={self.rope_base!r}: must be a number > 1")
        if self.attention not in ATTENTION_BACKENDS:
            raise ConfigError(
                f"model.attention={self.attention!r}: allowed {list(ATTENTION_BACKENDS)}"
            )
        return self


@dataclass
class OptimConfig:
    lr: float = 3e-3
    """Peak learning rate of AdamW, reached at the end of warmup."""
    weight_decay: float = 0.1
    """Decoupled weight decay, applied to matrices (2-D parameters) only."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW moment coefficients."""
    eps: float = 1e-8
    """AdamW denominator epsilon."""
    warmup_steps: int = 100
    """Optimizer steps of linear warmup from lr/warmup_steps to lr."""
    max_steps: int | None = None
    """Optimizer steps of the cosine schedule; None: the Trainer's estimated stepping batches."""
    min_lr_ratio: float = 0.1
    """The cosine decays to lr * min_lr_ratio, then stays there."""

    def validate(self) -> OptimConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        if not isinstance(self.lr, (int, float)) or self.lr <= 0:
            raise ConfigError(f"optim.lr={self.lr!r}: must be a positive number")
        if not isinstance(self.weight_decay, (int, float)) or self.weight_decay < 0:
            raise ConfigError(f"optim.weight_decay={self.weight_decay!r}: must be >= 0")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"optim.betas={list(self.betas)}: two numbers in [0, 1)")
        if not isinstance(self.eps, (int, float)) or self.eps <= 0:
            raise ConfigError(f"optim.eps={self.eps!r}: must be a positive number")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps={self.warmup_steps!r}: must be an integer >= 0")
        if self.max_steps is not None:
            _positive("optim.max_steps", self.max_steps)
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(f"optim.min_lr_ratio={self.min_lr_ratio}: must be in [0, 1]")
        return self


def coerce(cls: type, value: Any) -> Any:
    """A validated `cls` from an instance, a mapping (e.g. a Hydra DictConfig) or None."""
    if value is None:
        value = cls()
    elif isinstance(value, Mapping) or hasattr(value, "keys"):
        known = {f.name for f in fields(cls)}
        group = cls.__name__.removesuffix("Config").lower()
        unknown = sorted(set(value.keys()) - known)
        if unknown:
            raise ConfigError(f"{group}.{unknown[0]}: unknown key; allowed {sorted(known)}")
        value = cls(**{k: value[k] for k in value})
    elif not isinstance(value, cls):
        raise TypeError(f"expected {cls.__name__} or a mapping, got {type(value).__name__}")
    if isinstance(value, OptimConfig):
        value.betas = tuple(value.betas)
    return value.validate()


def as_dict(config: Any) -> dict[str, Any]:
    """Plain dict of a config dataclass (for save_hyperparameters / YAML)."""
    out = asdict(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def _positive(key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{key}={value!r}: must be a positive integer")
