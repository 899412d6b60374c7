"""Errors shared by every part of packlm, and how a command reports them."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from omegaconf.errors import MissingMandatoryValue

MAX_MESSAGE = 400
"""The longest error line packlm prints (characters after `error: `): a message quoting a
50 MB value (a line of merges.txt, a pasted corpus as a key's value) is cut in its middle."""


class ConfigError(ValueError):
    """An invalid configuration value; the message starts with the full key name."""


def bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    """`message` itself when at most `limit` characters, else its start (the key or file it
    names) and end (what is wrong) around `... [N characters cut] ...`."""
    if len(message) <= limit:
        return message
    head = limit * 3 // 5
    tail = limit - head - 40  # room for the marker
    cut = len(message) - head - tail
    return f"{message[:head]} ... [{cut:,} characters cut] ... {message[-tail:]}"


class OneLineParser(argparse.ArgumentParser):
    """argparse for packlm's commands: a wrong argument is one bounded `error: ...` line and
    exit 2 (argparse's own: the usage, then `prog: error: ...`, quoting the value whole)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {bounded(message)} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        """Refuse an argument holding a URL with a credential (`--cache-dir https://u:p@h`),
        masked, before anything reads it or quotes it back in an error line."""
        from packlm.config.credentials import check_arguments  # it imports this module

        try:
            check_arguments(sys.argv[1:] if args is None else list(args))
        except ConfigError as e:
            self.exit(2, f"error: {bounded(str(e))}\n")
        return super().parse_known_args(args, namespace)


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
        print(f"error: {bounded(message)}", file=sys.stderr)
        raise SystemExit(2 if isinstance(e, ConfigError | MissingMandatoryValue) else 1) from None
