"""README's Python example (under `## Use it from Python`) runs as written, on a fresh
directory: the DataModule from keywords, packlm's LightningModule, a plain Trainer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Use it from Python"


def example(path: Path) -> str | None:
    """The first python code block after the heading, None without the heading."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if HEADING not in text:
        return None
    block = re.search(r"```python\n(.*?)```", text.split(HEADING, 1)[1], flags=re.S)
    assert block, f"{path.name}: no python block under {HEADING!r}"
    return block.group(1)


def test_the_readme_python_example_runs(tmp_path):
    code = example(ROOT / "README.md")
    assert code is not None, f"README.md has no {HEADING!r} section"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^loss \d+\.\d+ after \d+ supervised tokens$", done.stdout, flags=re.M)
