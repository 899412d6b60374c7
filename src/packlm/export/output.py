"""An export's output folder, written whole or not at all.

Every format writes into a hidden sibling folder that is renamed to `out` only when all
its files are complete, so an interrupted export never leaves a half-written folder that
another library would load.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from packlm.cache.entry import replace_dir, temporary_sibling
from packlm.errors import ConfigError


@contextmanager
def output_dir(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder; on success it becomes `out`. A non-empty `out` is
    replaced only with `overwrite` (its old content is removed)."""
    if out is None or str(out) == "":
        raise ConfigError("out: give the folder to write the export into (out=<dir>)")
    dest = Path(out).expanduser().resolve()
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"out={out}: exists and is not a folder")
    if dest.is_dir() and any(dest.iterdir()) and not overwrite:
        raise ConfigError(f"out={out}: exists and is not empty (pass overwrite=true to replace it)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(dest)
    tmp.mkdir()
    try:
        yield tmp
        replace_dir(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
