"""A stopped run's message ends with the whole command that resumes it: a path any shell and
Hydra's override grammar read back as it is."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from packlm.callbacks.graceful_stop import TrainingStopped, resume_command


@pytest.mark.parametrize(
    "name",
    ["run", "my run", "a,b", "x=1", "it's", "[1]", "{a}", 'q"uote', "back\\slash", "été", "-~+@%"]
    + ["end\\", "a\\'b", "a\\\\'b", "$HOME", "`x`"],
)
def test_the_resume_command_reads_back_as_the_absolute_checkpoint(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    checkpoint = Path(name) / "checkpoints" / "last.ckpt"  # relative: printed absolute
    words = shlex.split(resume_command(checkpoint))
    assert words[:2] == ["python", "train.py"] and len(words) == 3
    (override,) = OverridesParser.create().parse_overrides([words[2]])
    assert override.key_or_group == "ckpt_path" and not override.is_sweep_override()
    assert override.value() == str(tmp_path / name / "checkpoints" / "last.ckpt")


def test_the_stop_message_says_the_command(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    message = str(TrainingStopped(signal.SIGINT, 12, checkpoint))
    assert message.startswith("stopped by SIGINT after step 12")
    assert message.splitlines()[-1].strip() == f"python train.py ckpt_path={checkpoint}"
