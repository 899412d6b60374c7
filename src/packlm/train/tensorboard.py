"""The run's TensorBoard logger: Lightning's, with the loss charts first and writers of its
own for the curves against supervised tokens and the mixture's two lines.

- `Loss/train`, `Loss/val`, `Loss/val_bpb`: TensorBoard's Time Series page sorts tag groups
  by name (upper case first) and opens only the first two, so `train/loss` sits below
  `attention`, `data`, `epoch`, `grad_norm` ... ; the same values at the same steps under
  `Loss/` make the loss the first charts of a run (then `Packing`, the batch pictures).
  The original tags stay as they are. (Copied in `log_metrics`, where Lightning writes them.)
- `by_tokens`: a writer of its own in `<log_dir>/by_tokens` (TensorBoard shows it as the run
  `tb/by_tokens`) for `SupervisedTokenAxis`, whose step is the count of supervised tokens.
- `sub_writer(name)`: a writer in `<log_dir>/<name>`, the run `tb/<name>`, whose tags have
  the same names as another sub-run's: TensorBoard draws one card per tag with a line per
  run, so `Mixture/<name>` in `tb/mixture_share` and in `tb/mixture_target` (`MixtureChart`)
  are the realized and the scheduled share on one chart, labelled by their run.
- A resume from (step, tokens) gives every writer TensorBoard's `purge_step`, each in its own
  step unit: TensorBoard then hides what the killed run logged past the checkpoint, so no
  step appears twice (a SIGKILL loses the steps after the last checkpoint; the resumed run
  logs them again). Lightning's step index of the k-th optimizer step is k-1, so the main
  writer and the other sub-runs purge from `step`; a token-axis point carries the tokens
  seen after its step, so the token writer purges from `tokens + 1`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.loggers.logger import DummyExperiment, rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from packlm.callbacks.token_axis import BY_TOKENS

LOSS_FIRST = {"train/loss": "Loss/train", "val/loss": "Loss/val", "val/bpb": "Loss/val_bpb"}


class RunTensorBoard(TensorBoardLogger):
    """TensorBoardLogger + the `Loss/` copies + the sub-run writers (see the module)."""

    def __init__(self, save_dir: str | os.PathLike, *args: Any, purge_tokens: int | None = None,
                 **kwargs: Any):  # fmt: skip
        super().__init__(save_dir, *args, **kwargs)
        self._purge = {BY_TOKENS: purge_tokens}  # a sub-run's purge step, else the main one's
        self._purge_step = kwargs.get("purge_step")
        self._writers: dict[str, Any] = {}

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        copies = {new: metrics[old] for old, new in LOSS_FIRST.items() if old in metrics}
        super().log_metrics({**metrics, **copies}, step)

    @property
    @rank_zero_experiment
    def by_tokens(self) -> Any:
        """The SummaryWriter of the token-axis curves (opened on first use, rank 0)."""
        return self.sub_writer(BY_TOKENS)

    def sub_writer(self, name: str) -> Any:
        """The SummaryWriter of the sub-run `name` (opened on first use; on other ranks than
        0 Lightning's dummy, as for `experiment`)."""
        if rank_zero_only.rank > 0:
            return DummyExperiment()
        if name not in self._writers:
            from torch.utils.tensorboard import SummaryWriter

            purge = self._purge.get(name, self._purge_step)
            self._writers[name] = SummaryWriter(os.path.join(self.log_dir, name), purge_step=purge)
        return self._writers[name]

    @rank_zero_only
    def finalize(self, status: str) -> None:
        super().finalize(status)
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
