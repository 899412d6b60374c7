"""A cache entry is a directory that appears whole or not at all.

Builders write into a hidden temporary sibling and rename it into place (under the entry's
lock, `lock.py`); an existing entry is moved aside first, so a reader never sees half of
one. A hit dates the entry (`mark_used`), which `python -m packlm.cache` prunes by.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path


def mark_used(entry: Path) -> None:
    """Set the entry's modification time to now on a cache hit: `python -m packlm.cache`
    lists and prunes by it. A read-only shared cache stays as it is."""
    with contextlib.suppress(OSError):
        os.utime(entry)


def temporary_sibling(dest: Path) -> Path:
    """A fresh hidden directory name next to `dest`, on the same filesystem (rename is atomic)."""
    return dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def replace_dir(tmp: Path, dest: Path) -> None:
    """Rename `tmp` to `dest`; an existing `dest` (stale or damaged) is moved aside, then removed
    (a file or a link where the entry should be too: the link only, never what it points to)."""
    if dest.exists() or dest.is_symlink():
        old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(dest, old)
        os.replace(tmp, dest)
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                old.unlink()
    else:
        os.replace(tmp, dest)
