"""How long a typo takes to be answered: command start -> the `error:` line on stderr.

    python bench/cli_error.py               # median of 5 runs per case
    python bench/cli_error.py --repeat 9

Each case is the command a user types (`python train.py data.windw=64`, a tool's typo) run
as a fresh process from an empty folder; the time is from just before the process starts to
the moment its `error:` line reaches the pipe (read as it is written, not at exit). The
reference in the same run: `python -c "import torch, lightning"`, what the answer used to
wait for (Hydra composed the config only after train.py had imported both), and a bare
`python -c pass`, the floor any command pays.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "train.py")]
CASES = {
    "train.py data.windw=64": [*TRAIN, "data.windw=64"],
    "train.py trainer.max_step=30": [*TRAIN, "trainer.max_step=30"],
    "train.py modle=medium": [*TRAIN, "modle=medium"],
    "train.py model=mediun": [*TRAIN, "model=mediun"],
    "train.py data.window=abc": [*TRAIN, "data.window=abc"],
    "train.py data.window=-3": [*TRAIN, "data.window=-3"],
    "train.py s3://KEY:SECRET@b/a.txt": [*TRAIN, "data.sources=[s3://KEY:SECRET@b/a.txt]"],
    "packlm.stats +epochs=two": [sys.executable, "-m", "packlm.stats", "+epochs=two"],
    "packlm.evaluate devce=cpu": [sys.executable, "-m", "packlm.evaluate", "ckpt_path=x",
                                  "devce=cpu"],
    "packlm.trace R step=five": [sys.executable, "-m", "packlm.trace", "R", "step=five"],
}  # fmt: skip
REFERENCES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import torch, lightning": [sys.executable, "-c", "import torch, lightning"],
}


def time_to_line(command: list[str], cwd: str) -> tuple[float, str]:
    """Seconds from start to the first `error:` line (or to exit, for a reference)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    line = ""
    for line in proc.stderr:
        if line.startswith("error:"):
            break
    seconds = time.perf_counter() - start
    proc.wait()
    return seconds, line.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, median of {args.repeat}")
    with tempfile.TemporaryDirectory() as cwd:
        for name, command in {**REFERENCES, **CASES}.items():
            runs = [time_to_line(command, cwd) for _ in range(args.repeat)]
            median = statistics.median(s for s, _ in runs)
            print(f"{name:<36} {median:6.2f} s   {runs[-1][1][:90]}")


if __name__ == "__main__":
    main()
