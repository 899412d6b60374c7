"""A Ctrl-C at any moment of a command ends with one line and the shell's exit status 130,
never Python's traceback (issue #47): the moments before any handler of the command's own,
while torch and Lightning import (they used to print the `KeyboardInterrupt` traceback)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from helpers.runs import subprocess_env, tiny_overrides, train_command
from packlm.runtime.interrupt import NOTICE


@pytest.mark.parametrize(
    ("command", "delay"),
    [("train.py", 0.6), ("train.py", 1.5), ("python -m packlm.generate", 0.3)],
)
def test_a_ctrl_c_while_the_command_starts_is_one_line(tiny_corpus, tmp_path, command, delay):
    if command == "train.py":
        argv = train_command(*tiny_overrides(tiny_corpus, tmp_path / "cache"),
                             f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    else:
        argv = [sys.executable, "-m", "packlm.generate", f"ckpt_path={tmp_path / 'none.ckpt'}"]
    process = subprocess.Popen(argv, cwd=tmp_path, env=subprocess_env(), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    if process.returncode not in (130, -signal.SIGINT):
        # only generate can end before the signal, and then with its own one-line refusal
        assert command != "train.py" and process.returncode == 2, (process.returncode, err[-3000:])
        assert err.strip().splitlines() == [
            f"error: ckpt_path={tmp_path / 'none.ckpt'}: no such checkpoint"
        ]
        pytest.skip("generate refused the missing checkpoint before the Ctrl-C")
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == NOTICE
