"""The records a packlm logger emits during a block, whatever Hydra's logging setup did to
propagation (caplog can miss them once train.py's setup has run in the same process)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def logged(name: str, level: int = logging.INFO) -> Iterator[list[logging.LogRecord]]:
    """The records of logger `name` at `level` or above, appended while the block runs."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level)
    handler.emit = records.append
    logger = logging.getLogger(name)
    old_level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > level:  # let the records through, and only those
        logger.setLevel(level)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
