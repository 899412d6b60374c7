"""generate refuses meaningless options before reading the checkpoint, and a file that is no
torch archive is said to be one in one line (issue 33)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from packlm.checkpoint.load import load_checkpoint
from packlm.commands.generate import generate
from packlm.errors import ConfigError


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"max_new_tokens": -5}, r"max_new_tokens=-5: must be a positive integer"),
        ({"max_new_tokens": 0}, r"max_new_tokens=0: must be a positive integer"),
        ({"max_new_tokens": "abc"}, r"max_new_tokens='abc': must be a positive integer"),
        ({"num_samples": 0}, r"num_samples=0: must be a positive integer"),
        ({"temperature": float("nan")}, r"temperature=nan: must be a finite number >= 0"),
        ({"temperature": float("inf")}, r"temperature=inf: must be a finite number >= 0"),
        ({"temperature": -0.5}, r"temperature=-0.5: must be a finite number >= 0"),
        ({"top_k": 0}, r"top_k=0: must be a positive integer or null"),
        ({"top_k": 2.5}, r"top_k=2.5: must be a positive integer or null"),
        ({"seed": -1}, r"seed=-1: must be an integer from 0"),
        ({"device": "gpu0"}, r"device='gpu0': not a torch device"),
        ({"prompt": 123}, r"prompt=123: must be a string"),
    ],
)
def test_a_meaningless_option_is_refused_before_the_checkpoint_is_read(tmp_path, option, message):
    missing = tmp_path / "absent.ckpt"  # never read: the option is refused first
    with pytest.raises(ConfigError, match=message):
        generate(missing, **option)


def test_generate_with_a_negative_length_exits_2_in_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "packlm.generate", f"ckpt_path={tmp_path / 'absent.ckpt'}",
         "max_new_tokens=-5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == (
        "error: max_new_tokens=-5: must be a positive integer"
    )


def test_random_bytes_are_not_a_checkpoint_in_one_line(tmp_path):
    path = tmp_path / "random.ckpt"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(ConfigError) as error:
        load_checkpoint(path)
    assert str(error.value) == (
        f"ckpt_path={path}: not a checkpoint (not a torch zip archive / truncated)"
    )
