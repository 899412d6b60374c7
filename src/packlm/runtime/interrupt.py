"""A Ctrl-C at any moment of a command ends with one line, never Python's traceback.

The commands stop cleanly on Ctrl-C where they do work (train's GracefulStop, prepare), but a
Ctrl-C in the first ~0.6 s, while Python imports torch and Lightning, printed the
`KeyboardInterrupt` traceback of whatever import was running. `quiet_ctrl_c` replaces the
hook that prints an uncaught exception for this one: `error: interrupted (Ctrl-C)`. Python
then ends the process as it does after any uncaught KeyboardInterrupt (atexit handlers run,
then SIGINT: the shell's exit status 130). Installed first thing by train.py and, for
`python -m packlm.<command>`, by packlm/__init__.py; HYDRA_FULL_ERROR=1 keeps the traceback.
"""

from __future__ import annotations

import os
import sys

NOTICE = "error: interrupted (Ctrl-C)"


def quiet_ctrl_c() -> None:
    """Print an uncaught KeyboardInterrupt as `NOTICE` (once per process; other exceptions
    are left to the hook that was there)."""
    previous = sys.excepthook
    if getattr(previous, "packlm_quiet_ctrl_c", False):
        return

    def hook(kind, value, traceback) -> None:
        if not interrupted(value) or os.environ.get("HYDRA_FULL_ERROR") == "1":
            previous(kind, value, traceback)
            return
        sys.stderr.write(f"\n{NOTICE}\n")  # on a line of its own, below a bar being drawn
        sys.stderr.flush()

    hook.packlm_quiet_ctrl_c = True
    sys.excepthook = hook


def interrupted(error: BaseException | None) -> bool:
    """A KeyboardInterrupt, or an error raised while one was handled (an import cut short by
    Ctrl-C can fail again in the import machinery: once a RecursionError)."""
    seen = 0
    while error is not None and seen < 100:
        if isinstance(error, KeyboardInterrupt):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False
