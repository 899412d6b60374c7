"""A mixture by share on one chart per source: the realized share and the schedule's, at
every optimizer step.

TensorBoard draws one card per tag and a line per run on it, so the two lines are the same
tag `Mixture/<name>` in two sub-runs of the run's TensorBoard (`RunTensorBoard.sub_writer`):
- `tb/mixture_share`: the source's share of the step's supervised targets (all ranks);
- `tb/mixture_target`: the schedule's share at the step (its first global batch).
`Mixture` sorts right after `Loss` among the tag groups, so it is one of the groups
TensorBoard's Time Series opens. Every optimizer step has its point (at Lightning's step
index, k-1 for the k-th step, as every other curve), so a switch at step k is a jump between
the points k-1 and k, not a ramp between two logging steps. Loggers other than TensorBoard
get the same numbers as `mixture/<name>/share` and `mixture/<name>/target`.

Cost: the step's supervised targets per source are counted on the device (one scatter per
micro-batch) and kept, a row per step, until the Trainer's next logging step
(log_every_n_steps), where one all-reduce and one host read of [steps, sources] write them
all: no sync in the other steps.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
import torch

from packlm.batch import IGNORE_INDEX, SOURCE_KEY
from packlm.callbacks.step_metrics import is_logging_step
from packlm.callbacks.views.tensorboard import tensorboard_logger
from packlm.config.sources import source_tag_names
from packlm.data.epoch.mixture.allocation import Allocation, Q

GROUP = "Mixture/"
SHARE_RUN, TARGET_RUN = "mixture_share", "mixture_target"


class MixtureChart(L.Callback):
    """See the module doc; nothing unless the datamodule mixes its sources by share."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._allocation: Allocation | None = None
        self._accumulate = 1
        self._seen_step = -1
        self._current: torch.Tensor | None = None  # int64 [n]: this rank's, the step in flight
        self._rows: list[torch.Tensor] = []  # int64 [n] per finished step since the last write
        self._steps: list[int] = []  # their optimizer step indices (k-1 for the k-th)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._seen_step = trainer.global_step  # a resumed run starts past its checkpoint
        datamodule = getattr(trainer, "datamodule", None)
        if not getattr(datamodule, "mixture", False):
            return
        rows = datamodule.data.batch_size * trainer.world_size
        self._accumulate = trainer.accumulate_grad_batches
        self._allocation = Allocation.of(datamodule.data, rows, self._accumulate)
        self.names = source_tag_names(datamodule.data.sources)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._allocation is None or not isinstance(batch, dict) or SOURCE_KEY not in batch:
            return
        labels, sources = batch["labels"], batch[SOURCE_KEY]  # [B, T] each
        supervised = ((labels != IGNORE_INDEX) & (sources >= 0)).flatten().to(torch.int64)
        if self._current is None:
            self._current = torch.zeros(len(self.names), dtype=torch.int64, device=labels.device)
        self._current.scatter_add_(0, sources.flatten().long().clamp(min=0), supervised)
        if trainer.global_step == self._seen_step:  # inside an accumulation cycle
            return
        self._seen_step = trainer.global_step
        self._rows.append(self._current)
        self._steps.append(trainer.global_step - 1)
        self._current = None
        if is_logging_step(trainer, trainer.global_step):
            self.write(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._rows:
            self.write(trainer)

    def write(self, trainer: L.Trainer) -> None:
        """Write the kept steps' shares and targets (every rank reduces; rank 0 writes)."""
        counts = trainer.strategy.reduce(torch.stack(self._rows), reduce_op="sum")  # [k, n]
        counts = counts.cpu().numpy().astype(np.float64)
        steps = np.asarray(self._steps, dtype=np.int64)  # [k]
        self._rows, self._steps = [], []
        shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)  # [k, n]
        targets = self._allocation.parts(steps * self._accumulate) / Q  # [k, n]
        if trainer.is_global_zero:
            write_lines(trainer, self.names, steps, shares, targets)


def write_lines(
    trainer: L.Trainer, names: list[str], steps: np.ndarray, shares: np.ndarray,
    targets: np.ndarray,
) -> None:  # fmt: skip
    """`Mixture/<name>` in the share and target sub-runs of the run's TensorBoard (steps [k],
    shares and targets [k, n]); `mixture/<name>/{share,target}` to the other loggers."""
    board = tensorboard_logger(trainer)
    board = board if hasattr(board, "sub_writer") else None  # RunTensorBoard
    if board is not None:
        for run, values in ((SHARE_RUN, shares), (TARGET_RUN, targets)):
            writer = board.sub_writer(run)
            for step, row in zip(steps.tolist(), values.tolist(), strict=True):
                for name, value in zip(names, row, strict=True):
                    writer.add_scalar(GROUP + name, value, global_step=step)
    for logger in trainer.loggers:
        if logger is board:
            continue
        for step, got, want in zip(steps.tolist(), shares.tolist(), targets.tolist(), strict=True):
            metrics: dict[str, Any] = {}
            for name, g, w in zip(names, got, want, strict=True):
                metrics |= {f"mixture/{name}/share": g, f"mixture/{name}/target": w}
            logger.log_metrics(metrics, step=step)
