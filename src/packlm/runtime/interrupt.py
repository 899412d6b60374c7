"""A Ctrl-C at any moment of a command ends with one line, never Python's traceback.

The commands stop cleanly on Ctrl-C where they do work (train's GracefulStop, prepare), but a
Ctrl-C in the first ~0.6 s, while Python imports torch and Lightning, printed the
`KeyboardInterrupt` traceback of whatever import was running. `quiet_ctrl_c` replaces the
hook that prints an uncaught exception for this one: `error: interrupted (Ctrl-C)`. Python
then ends the process as it does after any uncaught KeyboardInterrupt (atexit handlers run,
then SIGINT: the shell's exit status 130). Installed first thing by train.py and, for
`python -m packlm.<command>`, by packlm/__init__.py; HYDRA_FULL_ERROR=1 keeps the traceback.

A Ctrl-C that lands inside an import can also be swallowed there and leave a module half
imported, so the process fails later with another error and no KeyboardInterrupt in sight
(seen: numpy's `__getattr__` recursing after scipy's import was cut). `quiet_ctrl_c` therefore
also notes every SIGINT (then raises KeyboardInterrupt as Python's own handler does); an
uncaught error after one is the interruption's doing. Such an error (or one raised while a
KeyboardInterrupt was handled) gets the notice and exit status 130 at once (os._exit: a
half-imported interpreter has nothing of packlm's to clean up), where Python would exit 1.
"""

from __future__ import annotations

import os
import signal
import sys

NOTICE = "error: interrupted (Ctrl-C)"
_sigint_seen = False


def quiet_ctrl_c() -> None:
    """Print an uncaught KeyboardInterrupt, or an error a Ctrl-C caused, as `NOTICE` (installed
    once per process; other exceptions are left to the hook that was there)."""
    previous = sys.excepthook
    if getattr(previous, "packlm_quiet_ctrl_c", False):
        return

    def hook(kind, value, traceback) -> None:
        if not (_sigint_seen or interrupted(value)) or os.environ.get("HYDRA_FULL_ERROR") == "1":
            previous(kind, value, traceback)
            return
        sys.stderr.write(f"\n{NOTICE}\n")  # on a line of its own, below a bar being drawn
        sys.stderr.flush()
        if not isinstance(value, KeyboardInterrupt):  # Python would exit 1: give it Ctrl-C's 130
            sys.stdout.flush()
            os._exit(128 + signal.SIGINT)

    hook.packlm_quiet_ctrl_c = True
    sys.excepthook = hook
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _note_sigint)


def stop_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a Ctrl-C that was swallowed (an import caught it and the
    process went on): called once the heavy imports are done, before any work."""
    if _sigint_seen:
        raise KeyboardInterrupt


def _note_sigint(signum, frame) -> None:
    """Python's own SIGINT handler (raise KeyboardInterrupt), remembering that it ran."""
    global _sigint_seen
    _sigint_seen = True
    signal.default_int_handler(signum, frame)


def interrupted(error: BaseException | None) -> bool:
    """A KeyboardInterrupt, or an error raised while one was handled (an import cut short by
    Ctrl-C can fail again in the import machinery: once a RecursionError)."""
    seen = 0
    while error is not None and seen < 100:
        if isinstance(error, KeyboardInterrupt):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False
