"""The `logger` and `callbacks` config groups -> Lightning objects, built in the run directory.

Each entry is `{_target_: <class>, ...}` (the Lightning+Hydra template's manner): loggers get
`save_dir=<run dir>`, a ModelCheckpoint without `dirpath` gets `<run dir>/checkpoints`.
A callback that monitors a val/ metric is left out when the run has no validation (said in
the log), instead of warning at every step.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import get_class, instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

from packlm.errors import ConfigError
from packlm.train.tensorboard import RunTensorBoard

log = logging.getLogger(__name__)


def build_loggers(
    group: DictConfig | None, run_dir: Path, resumed: tuple[int, int] | None = None
) -> list[Any]:
    """The loggers of the `logger` group. On a resume from (step, supervised tokens), a
    TensorBoard logger gets TensorBoard's `purge_step` (the token-axis writer of
    `RunTensorBoard` its own, in tokens): what the killed run logged past the checkpoint
    is hidden, so no step appears twice."""
    loggers = []
    for name, node in _entries(group):
        kwargs: dict[str, Any] = {}
        cls = _target(f"logger.{name}", node)
        if "save_dir" in inspect.signature(cls).parameters and "save_dir" not in node:
            kwargs["save_dir"] = str(run_dir)
        if resumed and issubclass(cls, TensorBoardLogger):
            kwargs["purge_step"] = resumed[0]  # step index k-1 is the k-th step: keep < step
        if resumed and issubclass(cls, RunTensorBoard):
            kwargs["purge_tokens"] = resumed[1] + 1  # a point at `tokens` is before it
        loggers.append(_build(f"logger.{name}", node, kwargs))
    return loggers


def build_callbacks(group: DictConfig | None, run_dir: Path, validates: bool) -> list[L.Callback]:
    """The callbacks of the `callbacks` group."""
    callbacks = []
    for name, node in _entries(group):
        cls = _target(f"callbacks.{name}", node)
        monitor = node.get("monitor")
        if not validates and isinstance(monitor, str) and monitor.startswith("val/"):
            log.info(
                "callbacks.%s left out: it monitors %s and this run has no validation",
                name,
                monitor,
            )
            continue
        kwargs = {}
        if issubclass(cls, ModelCheckpoint) and node.get("dirpath") is None:
            kwargs["dirpath"] = str(run_dir / "checkpoints")
        callbacks.append(_build(f"callbacks.{name}", node, kwargs))
    return callbacks


def _entries(group: DictConfig | None):
    for name, node in (group or {}).items():
        if node is not None:  # `~callbacks.model_checkpoint` or `callbacks.x=null` removes one
            yield name, node


def _target(key: str, node: Any) -> type:
    try:
        return get_class(node["_target_"])
    except Exception as e:  # an unknown class or module
        raise ConfigError(
            f"{key}._target_={node.get('_target_')!r}: cannot import it ({e})"
        ) from None


def _build(key: str, node: Any, kwargs: dict[str, Any]) -> Any:
    try:
        return instantiate(OmegaConf.to_container(node, resolve=True), **kwargs)
    except Exception as e:  # a wrong argument of the class, a missing package
        cause = e.__cause__ or e
        raise ConfigError(f"{key}: cannot build it ({type(cause).__name__}: {cause})") from None
