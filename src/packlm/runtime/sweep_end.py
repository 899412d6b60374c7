"""Hydra callback (conf/config.yaml, hydra.callbacks): a sweep ends by saying where its jobs
are and what to run next.

Each job ends with its own summary (its checkpoint, `tensorboard --logdir <job>`), so a
sweep's console used to end on the last job's lines only; the multirun folder and
`python -m packlm.compare <folder>` are the next step for every sweep.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def sweep_lines(sweep_dir: str | Path) -> str:
    """The sweep's last lines: its folder and jobs (their folders), the next commands."""
    folder = Path(sweep_dir)
    found = folder.iterdir() if folder.is_dir() else ()
    jobs = [p for p in found if p.is_dir() and not p.name.startswith(".")]
    quoted = shlex.quote(str(folder))
    return "\n".join(
        (
            f"sweep: {len(jobs)} jobs in {folder}",
            f"compare them: python -m packlm.compare {quoted}",
            f"TensorBoard: tensorboard --logdir {quoted}",
        )
    )


class SweepEnd(Callback):
    """Print `sweep_lines` of hydra.sweep.dir when a multirun ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        print("\n" + sweep_lines(config.hydra.sweep.dir), flush=True)
