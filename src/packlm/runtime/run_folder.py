"""The folder a run or a sweep writes into, made and probed before anything is written there.

Kept apart from `packlm.train` (which imports torch and Lightning) because Hydra instantiates
`WritableRunDir` for every command composed from conf/config.yaml, prepare and stats too.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from packlm.errors import one_line_errors


def check_writable(directory: Path, what: str) -> None:
    """Create `directory` and a probe file in it; a clear error if either fails."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".packlm-write-test-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        hint = "disk full" if e.errno == errno.ENOSPC else e.strerror or str(e)
        raise OSError(e.errno, f"{what} {directory} is not writable ({hint})") from e


class WritableRunDir(Callback):
    """Hydra callback (conf/config.yaml, hydra.callbacks): the run or sweep directory is made
    and probed before Hydra writes .hydra/ into it, so a read-only or impossible
    hydra.run.dir is one `error:` line (exit 1), not Hydra's traceback."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config.hydra.run.dir, "the run directory (hydra.run.dir)")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config.hydra.sweep.dir, "the sweep directory (hydra.sweep.dir)")

    @staticmethod
    def _check(directory: str, what: str) -> None:
        with one_line_errors(OSError):
            check_writable(Path(directory), what)
