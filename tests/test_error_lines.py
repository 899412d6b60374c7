"""Every error line packlm prints is bounded (packlm.errors.bounded): a message quoting a huge
value (a 50 MB line of a file, a pasted corpus as a key's value) keeps its start (the key or
file it names) and its end (what is wrong), and says how much was cut."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from packlm.errors import MAX_MESSAGE, ConfigError, OneLineParser, bounded, one_line_errors

ROOT = Path(__file__).resolve().parents[1]


@given(st.text(min_size=0, max_size=3000))
def test_a_message_is_kept_whole_or_cut_in_its_middle_saying_how_much(message):
    out = bounded(message)
    if len(message) <= MAX_MESSAGE:
        assert out == message
        return
    assert len(out) <= MAX_MESSAGE + 20
    cut = int(re.search(r"\[([\d,]+) characters cut\]", out)[1].replace(",", ""))
    head, tail = out.split(" ... [", 1)[0], out.rsplit("cut] ... ", 1)[1]
    assert message.startswith(head) and message.endswith(tail)
    assert len(head) + cut + len(tail) == len(message)


def test_a_50_mb_value_in_an_error_is_one_bounded_line(capsys):
    value = "x" * 50_000_000
    with pytest.raises(SystemExit) as exited, one_line_errors(ConfigError):
        raise ConfigError(f"data.separator={value!r}: must be at most 64 characters")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err.startswith("error: data.separator='xxx") and len(err) < MAX_MESSAGE + 30
    assert err.rstrip().endswith("must be at most 64 characters")
    assert "[49,999," in err  # how much was cut: about the whole value


def test_argparse_errors_are_one_bounded_line(capsys):
    parser = OneLineParser(prog="python -m packlm.cache")
    parser.add_argument("--max-gb", type=float)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--max-gb", "9" * 100_000 + "x"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and len(err) < MAX_MESSAGE + 60
    assert err.startswith("error: argument --max-gb: invalid float value")


def test_a_huge_value_in_a_config_file_and_an_argument_is_a_bounded_line(tmp_path):
    """End to end: a 2 MB value of the wrong type in a preset (--config-dir), and a 100 kB
    trace argument: one line each, of a few hundred characters."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "huge.yaml").write_text(
        "# @package _global_\ndata:\n  window: " + "7a" * 1_000_000 + "\n"
    )
    for command in (
        [str(ROOT / "train.py"), "--config-dir", str(tmp_path), "experiment=huge"],
        ["-m", "packlm.trace", "R", "step=" + "5x" * 50_000],
    ):
        done = subprocess.run([sys.executable, *command], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 2, done.stderr[-500:]
        assert done.stderr.count("\n") == 1 and len(done.stderr) < MAX_MESSAGE + 30
        assert "characters cut" in done.stderr and "must be an integer" in done.stderr
