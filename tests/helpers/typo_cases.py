"""Run commands as a user types them, in this one process: `python typo_cases.py '<json>'`
with [[command, [args...]], ...] (command "train": train.py, else a module such as
packlm.stats); prints, per case, its exit code, its stderr, and whether torch and Lightning
were imported by the time it exited (JSON on stdout)."""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

TRAIN_PY = Path(__file__).resolve().parents[2] / "train.py"


def run(command: str, args: list[str]) -> dict:
    err = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if command == "train":
                sys.argv = [str(TRAIN_PY), *args]
                runpy.run_path(str(TRAIN_PY), run_name="__main__")
            else:
                sys.argv = [command, *args]
                runpy.run_module(command, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (1 if e.code else 0)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
    return {
        "code": code,
        "stderr": err.getvalue(),
        "torch": "torch" in sys.modules,
        "lightning": "lightning" in sys.modules,
    }


if __name__ == "__main__":
    answers = [run(command, args) for command, args in json.loads(sys.argv[1])]
    sys.stdout.write(json.dumps(answers))
