"""Screenshots of TensorBoard's tabs for the README: `python docs/screenshots.py LOGDIR`.

Starts TensorBoard on 127.0.0.1 (a free port) over LOGDIR (a run or a multirun directory),
then saves what a headless Chromium/Chrome shows on each page into docs/img/:
tensorboard_<page>.png for timeseries, scalars, images, text and hparams (`--pages` picks).
Not part of the test suite; it needs a browser (`apt-get install chromium`) and exits with
a message naming what is missing. Nothing leaves the machine: the browser loads only
http://127.0.0.1.

    python train.py -m data.window=32,64 data.stride=16,32 ...   # a sweep (see docs/figures.py)
    python docs/screenshots.py multirun/<date>/<time> --pages timeseries hparams
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("timeseries", "scalars", "images", "text", "hparams")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_tensorboard(logdir: Path, port: int, log_path: Path) -> subprocess.Popen:
    """TensorBoard on 127.0.0.1:port; returns once it answers (or exits with its log)."""
    with open(log_path, "wb") as log:  # the child keeps its own handle
        process = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
            + ["--host", "127.0.0.1", "--port", str(port), "--reload_interval", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"tensorboard exited: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/data/logdir", timeout=2)
            return process
        except OSError:
            time.sleep(0.5)
    process.terminate()
    sys.exit("tensorboard did not answer within 60 s")


def screenshot(browser: str, url: str, out: Path, size: str, wait_ms: int) -> None:
    """One headless-browser screenshot of `url` into `out` (the page gets `wait_ms` to load)."""
    with tempfile.TemporaryDirectory() as profile:  # a fresh profile: no pins, no state
        result = subprocess.run(
            [
                browser,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                f"--user-data-dir={profile}",
                f"--window-size={size}",
                f"--virtual-time-budget={wait_ms}",
                f"--screenshot={out}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    if result.returncode != 0 or not out.is_file():
        sys.exit(f"{browser} failed on {url}: {result.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logdir", type=Path, help="a run or multirun directory")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--pages", nargs="+", choices=PAGES, default=list(PAGES))
    parser.add_argument("--size", default="1600,1000", help="browser window, width,height")
    parser.add_argument("--wait-ms", type=int, default=20000, help="page load time per shot")
    args = parser.parse_args()
    if not args.logdir.is_dir():
        sys.exit(f"{args.logdir}: no such directory")
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        sys.exit(f"no headless browser found (looked for {', '.join(BROWSERS)}): install one")
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        tensorboard = start_tensorboard(args.logdir, port, Path(tmp) / "tensorboard.log")
        try:
            for page in args.pages:
                out = args.out / f"tensorboard_{page}.png"
                # SVG charts: the default WebGL ones draw after a headless screenshot is taken
                url = f"http://127.0.0.1:{port}/?forceSVG=true#{page}"
                screenshot(browser, url, out, args.size, args.wait_ms)
                print(out)
        finally:
            tensorboard.terminate()
            tensorboard.wait(timeout=30)


if __name__ == "__main__":
    main()
