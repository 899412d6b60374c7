"""The embedded default corpus: the running interpreter's standard-library `.py` files.

It is on every machine that runs packlm, needs no download, and is large enough (about
12 MB, 734 files on CPython 3.11) to train a tokenizer and a small model. The tokenizer
benchmark and `data.sources: [default]` use exactly this collector.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

# Directory names whose files are test suites or installed third-party packages.
EXCLUDED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages"})


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def default_corpus_files(root: Path | None = None) -> list[Path]:
    """Every `.py` file under the stdlib, sorted by relative POSIX path, test suites excluded."""
    root = stdlib_root() if root is None else Path(root)
    files = []
    for folder, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in EXCLUDED_DIRS]  # prune, don't walk them
        files.extend(Path(folder, f) for f in filenames if f.endswith(".py"))
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def iter_default_documents(root: Path | None = None) -> Iterator[tuple[str, str]]:
    """Yield (relative path, text) per file, decoded as strict UTF-8 (stdlib sources are)."""
    root = stdlib_root() if root is None else Path(root)
    for path in default_corpus_files(root):
        yield path.relative_to(root).as_posix(), path.read_bytes().decode("utf-8")
