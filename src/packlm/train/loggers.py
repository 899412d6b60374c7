"""The `logger` and `callbacks` config groups -> Lightning objects, built in the run directory.

Each entry is `{_target_: <class>, ...}` (the Lightning+Hydra template's manner): loggers get
`save_dir=<run dir>`, a ModelCheckpoint without `dirpath` gets `<run dir>/checkpoints`.
A callback that monitors a val/ metric is left out when the run has no validation (said in
the log), instead of warning at every step. On a resume a log keeps what the run logged up to
its checkpoint: TensorBoard's events past it are purged, a CSV log's earlier rows are written
back (Lightning's CSV writer starts `metrics.csv` afresh).
"""

from __future__ import annotations

import csv
import inspect
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import get_class, instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
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
        logger = _build(f"logger.{name}", node, kwargs)
        if resumed and isinstance(logger, CSVLogger) and rank_zero_only.rank == 0:
            keep_csv_rows(logger, resumed[0])
        loggers.append(logger)
    return loggers


def keep_csv_rows(logger: CSVLogger, step: int) -> int:
    """Write the rows of the run's `metrics.csv` logged before the checkpoint's `step` back
    into the resumed logger; returns how many were kept. Lightning's step index of the k-th
    optimizer step is k-1 (so < step), as in the TensorBoard purge; the token-axis curves
    are TensorBoard's only.

    Lightning's writer deletes `metrics.csv` when it opens, so the file is first renamed to
    a hidden copy: a kill before the rows are written back leaves them there for the next
    resume to find."""
    path = Path(logger.log_dir) / "metrics.csv"
    aside = path.with_name(".metrics.csv.before-resume")
    if path.is_file():
        os.replace(path, aside)
    if not aside.is_file():
        return 0
    with aside.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    kept = [row for row in rows if float(row.get("step") or 0) < step]
    with warnings.catch_warnings():  # "... will be deleted": its rows are kept, below
        warnings.filterwarnings("ignore", message="Experiment logs directory .* not empty")
        writer = logger.experiment
    for row in kept:
        at = int(float(row.pop("step")))
        writer.log_metrics({k: float(v) for k, v in row.items() if v not in ("", None)}, at)
    logger.save()
    aside.unlink()
    log.info(
        "resume: kept %d of %d rows of %s (those logged before step %d)",
        len(kept), len(rows), path, step,
    )  # fmt: skip
    return len(kept)


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
