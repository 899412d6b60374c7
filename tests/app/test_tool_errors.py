"""The tools besides train.py (prepare, stats, generate) report bad input as one line.

Each runs as a user types it; a bad config value exits 2, bad data 1, and neither prints a
traceback (HYDRA_FULL_ERROR=1 would).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from packlm.data.store.split import content_hash, is_validation


def tool(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def last_line(run: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    return run.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "module, args, code, message",
    [
        (
            "packlm.prepare",
            ["data.window=-1", "cache_dir=cache"],
            2,
            "error: data.window=-1: must be a positive",
        ),
        (
            "packlm.stats",
            ["data.sources=[missing.txt]", "cache_dir=cache"],
            1,
            "error: data.sources[0]='missing.txt'",
        ),
        ("packlm.generate", [], 2, "error: ckpt_path: missing; give it on the command line"),
    ],
)
def test_a_tool_reports_bad_input_in_one_line(tmp_path, module, args, code, message):
    run = tool(module, *args, cwd=tmp_path)
    assert run.returncode == code
    assert last_line(run).startswith(message)


def test_a_single_document_sent_to_validation_names_the_fix(tmp_path):
    """One file is one document: when the hash split sends it to validation, the message says
    how to hold out part of the file instead, and no cache entry is left half written."""
    text = next(
        t
        for i in range(100)
        if is_validation(content_hash((t := f"line {i}\n" * 50).encode()), 0.5)
    )
    (tmp_path / "one.txt").write_text(text)
    run = tool(
        "packlm.prepare",
        "data.sources=[one.txt]",
        "data.val_fraction=0.5",
        "cache_dir=cache",
        cwd=tmp_path,
    )
    assert run.returncode == 1
    line = last_line(run)
    assert "no training documents" in line and "data.val_fraction=0.5" in line
    assert "span: [0, 0.9]" in line and "data.val_sources=" in line
    tokenizers = tmp_path / "cache" / "tokenizers"
    assert not tokenizers.exists() or not any(
        p.name.endswith(".json") for p in tokenizers.rglob("*")
    )
