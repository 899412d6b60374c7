"""Every `python train.py ...` and `python -m packlm.<tool> ...` line of README.md and
docs/*.md composes: no unknown key, no wrong type, no bad value, no removed option (fast: no
training; tests/helpers/compose_commands.py says how each command is read)."""

from __future__ import annotations

import pytest

from helpers.compose_commands import compose_command
from helpers.markdown_commands import Command, all_commands, packlm_overrides

COMMANDS = [c for c in all_commands() if packlm_overrides(c)]


def test_the_docs_have_packlm_commands_in_every_file_that_shows_one():
    files = {c.file for c in COMMANDS}
    assert {"README.md", "docs/trace.md"} <= files, files


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.file}:{c.line}")
def test_a_documented_command_composes(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PACKLM_CACHE", str(tmp_path / "cache"))
    assert compose_command(command, tmp_path) >= 1


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("python train.py data.windw=128", "data.windw"),
        ("python train.py data.window=wide", "data.window"),
        ("python train.py -m data.stride=32,0", "data.stride"),
        ("python -m packlm.stats data.packing=dense", "data.packing"),
        ("python -m packlm.generate ckpt_path=x.ckpt promt=hi", "promt"),
        ("python -m packlm.trace run/ stepp=5", "stepp"),
    ],
)
def test_a_renamed_key_a_wrong_type_or_a_bad_value_fails_naming_it(
    line, named, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match="README.md:7") as failed:
        compose_command(Command("README.md", 7, 0, line, ""), tmp_path)
    assert named in str(failed.value)
