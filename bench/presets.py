"""The sweep behind the presets: val bits per byte for a budget of CPU time.

    python bench/presets.py                       # every candidate, fixed steps (default 650)
    python bench/presets.py --steps 700 --names L2d128T64B32v1536
    python bench/presets.py --max-time 00:00:01:00 --names L2d128T64B32v1536   # what a user sees
    python bench/presets.py --corpus default --steps 600 --names default L2   # python train.py
    python bench/presets.py --corpus '/path/to/numpy/**/*.py' --steps 600      # code not shipped

Each candidate is one `python train.py` run on Tiny Shakespeare with nanoGPT's split (the
first 90% of the file trains, the last 10% is held out, one document each: `data.sources`
entries with `span`), the cosine schedule ending at the last step, no sample text, no
checkpoints. With fixed steps the val/bpb of a candidate is deterministic (same seed, same
machine), so candidates compare at equal steps; their cost per step is the fit time the run
prints (noisy on a shared machine: compare it within one run of this script). With
`--max-time` the Trainer stops at that wall time, as in `experiment=shakespeare`. With
`--corpus` another corpus is read and validated by `data.val_fraction`, and the candidates
are `DEFAULT_CANDIDATES`: changes to what `python train.py` does, judged on code too.
Prints one JSON line per run: name, val/bpb, steps, fit seconds, CPU seconds of the run.
Results and the choice they led to: bench/presets.md.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


def candidate(layers, width, heads, window, batch, lr=3e-3, vocab=1024, stride=None):
    """Overrides of one candidate (stride defaults to half the window)."""
    return [
        f"tokenizer.vocab_size={vocab}", f"model.n_layer={layers}", f"model.n_embd={width}",
        f"model.n_head={heads}", f"model.context_length={window}", f"data.window={window}",
        f"data.stride={stride or window // 2}", f"data.batch_size={batch}", f"optim.lr={lr}",
    ]  # fmt: skip


CANDIDATES = {
    "L4d128T128B16": candidate(4, 128, 4, 128, 16),  # the default model at context 128
    "L3d128T64B32": candidate(3, 128, 4, 64, 32, lr=5e-3),
    "L2d128T64B32": candidate(2, 128, 4, 64, 32),
    "L2d128T64B32-lr6e-3": candidate(2, 128, 4, 64, 32, lr=6e-3),
    "L2d128T64B32-lr2e-3": candidate(2, 128, 4, 64, 32, lr=2e-3),
    "L2d128T64B32-stride64": candidate(2, 128, 4, 64, 32, stride=64),
    "L2d128T128B16": candidate(2, 128, 4, 128, 16),
    "L2d192T64B16": candidate(2, 192, 6, 64, 16),
    "L2d128T64B32v512": candidate(2, 128, 4, 64, 32, vocab=512),
    "L2d128T64B32v1536": candidate(2, 128, 4, 64, 32, vocab=1536, stride=64),
    "L3d128T64B32v1536": candidate(3, 128, 4, 64, 32, vocab=1536, stride=64),
    "L2d192T64B32v1536": candidate(2, 192, 6, 64, 32, vocab=1536, stride=64),
    "L2d192T64B32v1536-lr2e-3": candidate(2, 192, 6, 64, 32, lr=2e-3, vocab=1536, stride=64),
    "L2d192T64B32v1536-lr5e-3": candidate(2, 192, 6, 64, 32, lr=5e-3, vocab=1536, stride=64),
    "L2d256T64B32v1536": candidate(2, 256, 8, 64, 32, lr=2e-3, vocab=1536, stride=64),
    "L1d256T64B32v1536": candidate(1, 256, 8, 64, 32, vocab=1536, stride=64),
}

DEFAULT_CANDIDATES = {  # overrides of the session-3 default (4 x 128, vocab 4096, window 256)
    "default": [],
    "L2": ["model.n_layer=2"],
    "v2048": ["tokenizer.vocab_size=2048"],
    "v8192": ["tokenizer.vocab_size=8192"],
    "T128B32": ["data.window=128", "data.stride=128", "data.batch_size=32"],
    "d192": ["model.n_embd=192", "model.n_head=6"],
    "lr6e-3": ["optim.lr=6e-3"],
    "L2-T128B32": ["model.n_layer=2", "data.window=128", "data.stride=128", "data.batch_size=32"],
    "L2-T128B32-lr6e-3": [
        "model.n_layer=2",
        "data.window=128",
        "data.stride=128",
        "data.batch_size=32",
        "optim.lr=6e-3",
    ],
    "untied": ["model.tie_embeddings=false"],  # of the session-4 default (2 x 128, window 128)
}
"""For `--corpus default` or a path: the candidates for what `python train.py` does."""


def run(name: str, overrides: list[str], args: argparse.Namespace) -> dict:
    """One train.py run; its val/bpb, steps, fit and CPU seconds."""
    budget = [f"trainer.max_steps={args.steps}"]
    if args.max_time:
        budget.append(f"trainer.max_time={args.max_time}")
    if args.corpus == "shakespeare":  # nanoGPT's split of one file
        data = [
            f"data.sources=[{{path: '{args.text}', span: [0, 0.9]}}]",
            f"data.val_sources=[{{path: '{args.text}', span: [0.9, 1]}}]",
        ]
    else:  # the default corpus or a user's: validation by data.val_fraction
        data = [f"data.sources=[{args.corpus}]"]
    cmd = [
        sys.executable, "train.py", f"hydra.run.dir={args.out}/{name}", f"cache_dir={args.cache}",
        *data, "train.sample_prompt=", "train.log_batch_images=false",
        "train.checkpoint_every_n_steps=null", "trainer.val_check_interval=1000000",
        *overrides, *budget, *args.extra,
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"name": name, "wall_s": round(time.perf_counter() - start, 1)}
    out["cpu_s"] = round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1)
    bpb = re.search(r"val/bpb ([0-9.]+)", done.stdout)
    fit = re.search(
        r"trained (\d+) steps in \d+ s(?: \([^)]*\))?: ([\d,]+) supervised tokens \(([\d,]+) tok",
        done.stdout,
    )
    if bpb is None or fit is None:
        out["error"] = (done.stdout + done.stderr)[-2000:]
        return out
    tokens, rate = (int(fit[i].replace(",", "")) for i in (2, 3))
    return {**out, "val_bpb": float(bpb[1]), "steps": int(fit[1]), "fit_s": round(tokens / rate, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--corpus", default="shakespeare",
        help="shakespeare (nanoGPT's split of --text), default (what python train.py reads), "
        "or a data.sources entry such as '/path/to/repo/**/*.py' (DEFAULT_CANDIDATES)",
    )  # fmt: skip
    p.add_argument("--names", nargs="*", help="candidates (default: all of the corpus's table)")
    p.add_argument("--steps", type=int, default=650)
    p.add_argument("--max-time", default=None, help="trainer.max_time, e.g. 00:00:01:00")
    p.add_argument("--text", type=Path, default=TEXT)
    p.add_argument("--out", default="/tmp/packlm-presets")
    p.add_argument("--cache", default="/tmp/packlm-presets/cache")
    p.add_argument("extra", nargs="*", help="more overrides for every run")
    args = p.parse_args()
    table = CANDIDATES if args.corpus == "shakespeare" else DEFAULT_CANDIDATES
    names = args.names or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        sys.exit(f"--names {' '.join(unknown)}: not in the table ({', '.join(table)})")
    if args.corpus == "shakespeare" and not args.text.is_file():
        sys.exit(f"{args.text}: no such file (give --text path/to/tinyshakespeare.txt)")
    for name in names:
        print(json.dumps(run(name, table[name], args)), flush=True)


if __name__ == "__main__":
    main()
