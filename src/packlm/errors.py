"""Errors shared by every part of packlm, and how a command reports them."""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from omegaconf.errors import MissingMandatoryValue


class ConfigError(ValueError):
    """An invalid configuration value; the message starts with the full key name."""


def write_error(e: OSError, what: str, elsewhere: str, then: str = "") -> OSError:
    """The one wording of a failed write: `cannot write <what>: <reason>`, and on a full disk
    what to do (`elsewhere`: the setting that moves it); `then`: what is still intact."""
    hint = f" (disk full: free space or {elsewhere})" if e.errno == errno.ENOSPC else ""
    return OSError(e.errno, f"cannot write {what}: {e.strerror or e}{hint}{then}")


@contextmanager
def one_line_errors(*errors: type[BaseException]) -> Iterator[None]:
    """A command's own errors (`errors`) print as one line, `error: ...`, and exit 2 for a
    config value (ConfigError, a missing mandatory key) or 1 (data, files, a missing extra);
    HYDRA_FULL_ERROR=1 re-raises them with their traceback."""
    try:
        yield
    except errors as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        traceback.clear_frames(e.__traceback__)  # progress bars close first, above the line
        message = str(e)
        if isinstance(e, MissingMandatoryValue) and getattr(e, "full_key", None):
            message = f"{e.full_key}: missing; give it on the command line ({e.full_key}=...)"
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2 if isinstance(e, ConfigError | MissingMandatoryValue) else 1) from None
