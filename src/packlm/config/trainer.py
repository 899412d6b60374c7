"""The `trainer` config group: every `lightning.Trainer` argument, checked before any work.

The keys come from the Trainer's own signature (read from Lightning's source, so composing a
config imports neither Lightning nor torch), so a new Lightning release needs no edit:
`TrainerConfig` documents the ones whose value packlm chooses (or that users reach for
first); `TrainerSchema` adds every other argument with Lightning's own default, so
`trainer.max_time=00:00:01:00` or `trainer.profiler=simple` work without a `+`. Values are
checked against the signature's annotations, naming the key. The arguments packlm sets
itself are refused with the reason (`OWNED`). Only values that differ from Lightning's
defaults reach the Trainer, so it prints no "was configured so ..." notes for defaults.
"""

from __future__ import annotations

import ast
import contextvars
import datetime
import importlib.util
import inspect
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, make_dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

from packlm.config.group import ConfigGroup
from packlm.errors import ConfigError

OWNED = {
    "logger": "packlm builds the loggers from the `logger` group (logger=tensorboard|csv|many|wandb)",
    "callbacks": "packlm builds the callbacks; add yours in the `callbacks` group "
    "(+callbacks.<name>._target_=lightning.pytorch.callbacks.EarlyStopping ...)",
    "plugins": "packlm sets its atomic checkpoint writer",
    "use_distributed_sampler": "the DataModule shards the epoch plan itself",
    "reload_dataloaders_every_n_epochs": "each epoch has its own plan (and length)",
    "default_root_dir": "the run directory is hydra.run.dir",
}
"""Trainer arguments packlm sets itself, with the reason (an error names it when set)."""


SIGNATURE_CHECKS = contextvars.ContextVar("trainer_signature_checks", default=True)
"""False while `packlm.config.precheck` validates a config before Lightning is imported: the
values are then checked against the Trainer's annotations when the run validates it again."""


def trainer_parameters() -> dict[str, inspect.Parameter]:
    """The arguments of `lightning.Trainer` a config may set, with their annotations."""
    import lightning as L  # here, not above: `packlm.config.schema` must not import torch (see below)

    params = inspect.signature(L.Trainer.__init__).parameters
    return {k: p for k, p in params.items() if k != "self" and k not in OWNED}


def trainer_defaults() -> dict[str, Any]:
    """{argument: default} of `lightning.Trainer` a config may set, read from Lightning's
    source with `ast` where every default is a literal: composing a config needs only these,
    and importing Lightning (and torch) cost `python -m packlm.prepare` 6-9 s and 400 MB
    before it read a byte. Falls back to the signature when the source reads otherwise."""
    spec = importlib.util.find_spec("lightning")  # finds the package without importing it
    source = Path(spec.submodule_search_locations[0], "pytorch", "trainer", "trainer.py")
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
        trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
        init = next(n for n in trainer.body if getattr(n, "name", None) == "__init__")
        args = init.args
        positional = zip(args.args[::-1], args.defaults[::-1], strict=False)  # defaults: the last
        pairs = [*positional, *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
        defaults = {a.arg: ast.literal_eval(d) for a, d in pairs if d is not None}
    except (OSError, SyntaxError, StopIteration, ValueError):
        defaults = {}
    if not defaults:
        return {
            k: p.default
            for k, p in trainer_parameters().items()
            if p.default is not inspect.Parameter.empty
        }
    return {k: v for k, v in defaults.items() if k not in OWNED}


@dataclass
class TrainerConfig(ConfigGroup):
    """The `lightning.Trainer` arguments packlm chooses a value for, or documents first."""

    group: ClassVar[str] = "trainer"
    passthrough: ClassVar[str] = (
        "Every other argument of lightning.Trainer (max_time, limit_train_batches, profiler, "
        "benchmark, detect_anomaly, ...), with Lightning's default; packlm sets "
        + ", ".join(OWNED)
        + " itself."
    )

    accelerator: str = "auto"
    """cpu, gpu, mps, auto."""
    devices: Any = 1
    """Devices per node (an int, a list of ids, or "auto")."""
    strategy: str = "auto"
    """auto, ddp, ddp_spawn, ... (ddp on CPU: `trainer.accelerator=cpu trainer.devices=2`)."""
    precision: str = "auto"
    """auto (bf16-mixed on a CUDA GPU with bf16, else 32-true), 32-true, bf16-mixed, 16-mixed, bf16-true, 64-true."""
    max_steps: int = 950
    """Optimizer steps of the run (-1: no limit; see train.max_supervised_tokens)."""
    max_epochs: int = -1
    """Epochs of the run (-1: no limit)."""
    max_time: Any = None
    """Stop after this wall time, "DD:HH:MM:SS" (e.g. 00:00:01:00), checkpoint included."""
    val_check_interval: Any = 200
    """Training batches between validations (or a fraction of an epoch)."""
    check_val_every_n_epoch: int | None = None
    """Validate every N epochs instead (null: by val_check_interval)."""
    limit_val_batches: Any = None
    """Validation batches per validation (a fraction or a count; 0: no validation; null: all)."""
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
    enable_model_summary: bool = False
    """Lightning's layer table (packlm prints a one-line parameter count instead)."""
    fast_dev_run: Any = False
    """Run N batches (true: 1) of training and validation as a smoke test."""

    def validate(self) -> TrainerConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        params = trainer_parameters() if SIGNATURE_CHECKS.get() else {}
        for key, value in asdict(self).items():
            if key == "precision" and value == "auto":
                continue  # packlm's own choice, resolved by trainer_kwargs
            if key in params and not _fits(value, params[key].annotation):
                raise ConfigError(
                    f"trainer.{key}={value!r}: expected {_describe(params[key].annotation)}"
                )
        if self.accumulate_grad_batches < 1:
            raise ConfigError(
                f"trainer.accumulate_grad_batches={self.accumulate_grad_batches}: must be >= 1"
            )
        _check_ranges(asdict(self))
        return self

    @classmethod
    def from_mapping(cls, values: Any = None) -> TrainerConfig:
        if values is not None and hasattr(values, "keys"):
            for key in values:
                if key in OWNED:
                    raise ConfigError(f"trainer.{key}: not settable: {OWNED[key]}")
        return super().from_mapping(values)

    def trainer_kwargs(self) -> dict[str, Any]:
        """The values that differ from Lightning's defaults (the Trainer's keyword arguments)."""
        from packlm.config.precision import auto_precision  # torch: only where a run starts

        params = trainer_parameters()
        values = asdict(self)
        if values["precision"] == "auto":
            values["precision"] = auto_precision(self.accelerator)
        return {k: v for k, v in values.items() if k in params and v != params[k].default}


def _schema() -> type:
    """TrainerConfig plus every other Trainer argument, typed Any, with Lightning's default."""
    documented = {f for f in TrainerConfig.__dataclass_fields__}
    extra = [
        (name, Any, field(default=default))
        for name, default in trainer_defaults().items()
        if name not in documented
    ]
    return make_dataclass("TrainerSchema", extra, bases=(TrainerConfig,))


TrainerSchema = _schema()


def _check_ranges(values: dict[str, Any]) -> None:
    """The values Lightning would refuse with a traceback after the store was built (or
    accept and misuse: a negative clip value), named before any work."""
    devices = values.get("devices")
    if devices in (0, [], "0", "") or (isinstance(devices, int) and devices < -1):
        raise ConfigError(
            f"trainer.devices={devices!r}: a positive count, -1 or 'auto' (all), or a list of ids"
        )
    clip = values.get("gradient_clip_val")
    if clip is not None and _is_number(clip) and clip < 0:
        raise ConfigError(
            f"trainer.gradient_clip_val={clip!r}: must be >= 0 (or null: no clipping)"
        )
    for key in ("val_check_interval", *(k for k in values if k.startswith("limit_"))):
        value = values.get(key)
        if value is None or not _is_number(value):
            continue
        zero_ok = key != "val_check_interval"  # limit_*=0 turns the loop off
        if isinstance(value, float) and not (0.0 <= value <= 1.0 and (zero_ok or value > 0)):
            what = "[0, 1]" if zero_ok else "(0, 1]"
            raise ConfigError(
                f"trainer.{key}={value!r}: a fraction in {what} of an epoch, or a batch count"
            )
        if isinstance(value, int) and value < (0 if zero_ok else 1):
            raise ConfigError(
                f"trainer.{key}={value!r}: must be {'>= 0' if zero_ok else '>= 1'} batches "
                "(or a fraction of an epoch)"
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fits(value: Any, annotation: Any) -> bool:
    """Whether a config value can be the argument of this annotation (values from YAML or
    the command line: strings, numbers, booleans, null, lists and dicts)."""
    if annotation in (inspect.Parameter.empty, Any):
        return True
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(annotation))
    if origin is Literal:
        return value in typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation in (str, Path):
        return isinstance(value, str)
    if origin in (list, Iterable):
        return isinstance(value, list)
    if origin in (dict, Mapping):
        return isinstance(value, dict)
    if annotation is datetime.timedelta:
        return False  # given as a string or a dict, which other arms of its union take
    return isinstance(annotation, type) and isinstance(value, annotation)


def _describe(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "")
    return text.replace("NoneType", "null")
