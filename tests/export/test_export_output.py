"""An export's folder: `overwrite=true` replaces only an earlier export, never another folder
nor the working directory; its errors name `out`; its files get the mode of their siblings
(issue 33)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from packlm.commands.export.output import MARKER
from packlm.config.schema import CONFIG_DIR
from packlm.errors import ConfigError

pytest.importorskip("tiktoken")


def run_export(*overrides: str) -> dict:
    from packlm.commands.export.__main__ import export

    with initialize_config_dir(CONFIG_DIR, version_base=None):
        return export(compose("export", overrides=list(overrides)))


def user_files(folder):
    (folder / "notes.txt").write_text("mine")
    (folder / "data").mkdir()
    (folder / "data" / "x.bin").write_bytes(b"\x00" * 10)
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


def test_overwrite_in_the_working_directory_deletes_nothing_and_says_why(
    tmp_path, tiny_ckpt, monkeypatch
):
    ckpt, _ = tiny_ckpt
    work = tmp_path / "work"
    work.mkdir()
    before = user_files(work)
    monkeypatch.chdir(work)
    with pytest.raises(ConfigError, match=f"out=.: {work} is the working directory"):
        run_export("format=tiktoken", f"ckpt_path={ckpt}", "out=.", "overwrite=true")
    with pytest.raises(ConfigError, match=f"out=..: {tmp_path} is a parent of the working"):
        run_export("format=tiktoken", f"ckpt_path={ckpt}", "out=..", "overwrite=true")
    assert sorted(p.relative_to(work) for p in work.rglob("*")) == before
    assert os.getcwd() == str(work)


def test_the_command_in_a_folder_of_other_files_refuses_in_one_line(tmp_path, tiny_ckpt):
    ckpt, _ = tiny_ckpt
    before = user_files(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "packlm.export", "format=tiktoken", f"ckpt_path={ckpt}", "out=.",
         "overwrite=true"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: out=.: {tmp_path} is the working directory")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_overwrite_replaces_an_earlier_export_and_nothing_else(tmp_path, tiny_ckpt):
    ckpt, _ = tiny_ckpt
    out = tmp_path / "tk"
    summary = run_export("format=tiktoken", f"ckpt_path={ckpt}", f"out={out}")
    assert (out / MARKER).is_file() and MARKER not in summary["files"]
    (out / "stale.txt").write_text("from the earlier export's day")
    run_export("format=tiktoken", f"ckpt_path={ckpt}", f"out={out}", "overwrite=true")
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, *summary["files"]])

    other = tmp_path / "other"
    other.mkdir()
    before = user_files(other)
    with pytest.raises(ConfigError, match=f"out={other}: .*holds no {MARKER}.*not an earlier"):
        run_export("format=tiktoken", f"ckpt_path={ckpt}", f"out={other}", "overwrite=true")
    assert sorted(p.relative_to(other) for p in other.rglob("*")) == before


def test_an_export_that_cannot_be_written_names_out(tmp_path, tiny_ckpt):
    ckpt, _ = tiny_ckpt
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "tk"
    with pytest.raises(OSError, match=f"cannot write the export out={out}"):
        run_export("format=tiktoken", f"ckpt_path={ckpt}", f"out={out}")


def test_every_file_of_an_hf_export_has_the_mode_of_a_plain_file(tmp_path, tiny_ckpt):
    """safetensors writes model.safetensors through a temporary file of mode 0600."""
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    ckpt, _ = tiny_ckpt
    old = os.umask(0o022)
    try:
        run_export("format=hf", f"ckpt_path={ckpt}", f"out={tmp_path / 'hf'}")
    finally:
        os.umask(old)
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in (tmp_path / "hf").iterdir()}
    assert "model.safetensors" in modes
    assert set(modes.values()) == {"0o644"}, modes
