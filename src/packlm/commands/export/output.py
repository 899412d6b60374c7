"""An export's output folder, written whole or not at all, and replacing only an export.

Every format writes into a hidden sibling folder that is renamed to `out` only when all
its files are complete, so an interrupted export never leaves a half-written folder that
another library would load. Each export leaves `MARKER` in its folder: `overwrite=true`
replaces only a folder holding it (an earlier export), never another non-empty folder, and
never the working directory or one above it (renaming it away deleted the user's files and
left the process in a removed directory: `[Errno 2]`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from packlm.cache.entry import replace_dir, temporary_sibling
from packlm.errors import ConfigError, write_error

MARKER = ".packlm-export"
"""Written into every export's folder: what `overwrite` may replace."""


def destination(out: str | os.PathLike | None, overwrite: bool = False) -> Path:
    """`out` resolved, or a ConfigError saying why it may not be (re)written."""
    if out is None or str(out) == "":
        raise ConfigError("out: give the folder to write the export into (out=<dir>)")
    dest = Path(out).expanduser().resolve()
    cwd = Path.cwd().resolve()
    if dest == cwd or dest in cwd.parents:
        where = (
            "the working directory" if dest == cwd else f"a parent of the working directory {cwd}"
        )
        raise ConfigError(
            f"out={out}: {dest} is {where}; an export replaces its folder whole, so give a new "
            "folder (out=<dir>/export)"
        )
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"out={out}: {dest} exists and is not a folder")
    if dest.is_dir() and any(dest.iterdir()):
        if not overwrite:
            raise ConfigError(
                f"out={out}: {dest} exists and is not empty (pass overwrite=true to replace "
                "an earlier export)"
            )
        if not (dest / MARKER).is_file():
            raise ConfigError(
                f"out={out}: {dest} is not empty and holds no {MARKER}, so it is not an earlier "
                "export; overwrite=true replaces only those: give another folder or empty it"
            )
    return dest


@contextmanager
def output_dir(out: str | os.PathLike | None, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary folder; on success it becomes `out` (see `destination` for what
    may be replaced). An OSError names `out`."""
    dest = destination(out, overwrite)
    tmp = temporary_sibling(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"written_by": "packlm.export"}) + "\n", "utf-8")
        _plain_modes(tmp)
        replace_dir(tmp, dest)
    except OSError as e:
        raise write_error(e, f"the export out={dest}", "give another out") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _plain_modes(folder: Path) -> None:
    """Give every file the mode `open()` would (0666 less the umask): libraries that write
    through a temporary file of their own (safetensors' save_file: 0600) leave it private."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~umask)
