"""Issue #59, family 5: corpora through symbolic links, end to end (`python -m packlm.prepare`).
The rule and the unit probes: docs/links.md, tests/data/store/test_source_links.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the", "park"]


def _prepare(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    env.pop("HYDRA_FULL_ERROR", None)
    args = [sys.executable, "-m", "packlm.prepare", "data.val_fraction=0",
            "tokenizer.vocab_size=280", f"cache_dir={cwd / 'cache'}", *overrides]  # fmt: skip
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def test_a_glob_through_a_link_loop_and_a_linked_subfolder_reads_each_file_once(tmp_path):
    """Before: `loopy/**/*.txt` through `sub/up -> ..` gave 123 training documents instead of
    3 (exit 0), and a folder holding a symlinked subfolder dropped it, `skipped: nothing`."""
    (tmp_path / "loopy" / "sub").mkdir(parents=True)
    (tmp_path / "far").mkdir()
    for k, rel in enumerate(["loopy/a.txt", "loopy/c.txt", "loopy/sub/b.txt", "far/f.txt"]):
        (tmp_path / rel).write_text(" ".join(WORDS[k:] + WORDS[:k]) * 20)
    os.symlink("..", tmp_path / "loopy" / "sub" / "up")
    os.symlink("../far", tmp_path / "loopy" / "linked")
    done = _prepare(tmp_path, "data.sources=[loopy/**/*.txt]")
    assert done.returncode == 0, done.stderr[-3000:]
    train = json.loads(done.stdout)["summary"]["train"]
    assert train["documents"] == 4  # a, c, b and the linked folder's f: each once
    assert train["dropped"]["folders_reached_again"] == 1
    assert train["left_out"] == {"folders_reached_again": ["loopy/sub/up (walked as loopy)"]}
    assert "train skipped: 1 folders reached again" in done.stderr
    assert "train folders reached again: loopy/sub/up (walked as loopy)" in done.stderr
