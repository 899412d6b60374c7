"""The small-LM recipe's options against `python train.py`'s defaults, at equal wall time.

    python bench/recipe.py --corpus code  --seconds 90 --repeats 2     # sympy's core sources
    python bench/recipe.py --corpus prose --names baseline muon        # READMEs and licenses
    python bench/recipe.py --corpus '/path/to/repo/**/*.py' --names baseline qk_norm
    python bench/recipe.py --corpus code --steps 200     # equal steps: the load does not matter
    python bench/recipe.py --optimizer-cost              # one optimizer step: Muon / AdamW

Each run is `python train.py` (the default model and data settings) on a corpus the project
does not ship, stopped by `trainer.max_time` with the schedule annealed on that clock
(`optim.anneal_by_time=true`), so every option gets the same wall time and ends annealed;
the steps it fits in are its own. Options run interleaved (A, B, C, A, B, C, ...), so load
from other processes falls on all of them; the load average before and after each run is
printed with it, and a figure taken above ~2.5 on the two-core machine does not choose a
default. With --steps every option trains that many steps instead (the cosine ending there):
its val/bpb is the same on a loaded machine, and fit_s / steps its cost per step, to be
compared within one run of this script. One JSON line per run (presets.py's fields plus the
option, repeat, loads and OMP_NUM_THREADS). --optimizer-cost times the optimizer step alone
(AdamW; Muon with its Newton-Schulz in float32 and in bf16) on the default model's weights,
alternating in one process, as a ratio to AdamW's.
Results: bench/presets.md, "The small-LM recipe (issue 61)".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from presets import run  # noqa: E402  (one train.py run, its val/bpb, steps, CPU seconds)

SITE = Path(sysconfig.get_paths()["purelib"])
CORPORA = {
    # a Python package's sources other than the stdlib (the default corpus): sympy's core
    "code": f"'{SITE}/sympy/core/**/*.py'",
    # prose: the system's package READMEs (gzip read by content) and license texts
    "prose": "'/usr/share/doc/**/README*', '/usr/share/common-licenses/*'",
}

OPTIONS = {
    "baseline": [],
    "muon": ["optim=muon"],
    "muon-f32": ["optim=muon", "optim.muon_ns_dtype=float32"],
    "muon-lr0.01": ["optim=muon", "optim.muon_lr=0.01"],
    "muon-lr0.04": ["optim=muon", "optim.muon_lr=0.04"],
    "qk_norm": ["model.qk_norm=true"],
    "relu2": ["model.mlp=relu2"],
    "zero_init_proj": ["model.zero_init_proj=true"],
    "wsd": ["optim.schedule=wsd"],
    "logit_softcap": ["model.logit_softcap=15"],
    "residual_scalars": ["model.residual_scalars=true"],
    "recipe": ["optim=muon", "optim.schedule=wsd", "model.qk_norm=true"],  # the winners together
    "muon_wsd": ["optim=muon", "optim.schedule=wsd"],  # the recipe an HF export carries
}


def optimizer_cost(repeats: int = 30) -> None:
    """Median seconds of one optimizer step on `python train.py`'s model (random gradients),
    AdamW and Muon (float32 and bf16 Newton-Schulz), interleaved; ratios to AdamW's."""
    import statistics
    import time

    import torch

    from packlm.config.model import ModelConfig, OptimConfig
    from packlm.model.lit_module import LitCausalLM

    lit = LitCausalLM(ModelConfig(), OptimConfig(max_steps=10))
    params = list(lit.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    steps = {}
    for name, algo, dtype in (("adamw", "adamw", "auto"), ("muon-f32", "muon", "float32"),
                              ("muon-bf16", "muon", "bfloat16")):  # fmt: skip
        lit.optim_config = OptimConfig(max_steps=10, algorithm=algo, muon_ns_dtype=dtype)
        steps[name] = lit._optimizer()
    times = {name: [] for name in steps}
    with torch.no_grad():
        for _ in range(repeats):
            for name, opt in steps.items():
                start = time.perf_counter()
                opt.step()
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["adamw"])
    for name, t in times.items():
        median = statistics.median(t)
        print(json.dumps({"optimizer": name, "ms": round(median * 1e3, 2),
                          "ratio_to_adamw": round(median / base, 2),
                          "load": os.getloadavg()[0], "threads": torch.get_num_threads()}))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", default="code", help="code, prose or a data.sources entry")
    p.add_argument("--names", nargs="*", default=list(OPTIONS), help="options to run")
    p.add_argument("--seconds", type=int, default=90, help="trainer.max_time of every run")
    p.add_argument("--steps", type=int, default=None, help="equal steps instead of time")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default="/tmp/packlm-recipe")
    p.add_argument("--cache", default="/tmp/packlm-recipe/cache")
    p.add_argument("extra", nargs="*", help="more overrides for every run")
    p.add_argument("--optimizer-cost", action="store_true", help="time one optimizer step")
    args = p.parse_args()
    if args.optimizer_cost:
        optimizer_cost()
        return
    unknown = [n for n in args.names if n not in OPTIONS]
    if unknown:
        sys.exit(f"--names {' '.join(unknown)}: not in the table ({', '.join(OPTIONS)})")
    seconds = f"00:00:{args.seconds // 60:02d}:{args.seconds % 60:02d}"
    by_time = ["optim.anneal_by_time=true"] if args.steps is None else []
    settings = argparse.Namespace(
        corpus=CORPORA.get(args.corpus, args.corpus), steps=args.steps or 100_000,
        max_time=seconds if args.steps is None else None, text=None, out=args.out,
        cache=args.cache, extra=[*by_time, "overwrite_run=true", *args.extra],
    )  # fmt: skip
    threads = os.environ.get("OMP_NUM_THREADS")
    for repeat in range(args.repeats):
        for name in args.names:
            load_before = os.getloadavg()[0]
            label = args.corpus if args.corpus in CORPORA else "corpus"  # a folder name
            result = run(f"{label}-{name}-{repeat}", OPTIONS[name], settings)
            loads = {"load_before": round(load_before, 2), "load_after": os.getloadavg()[0]}
            loads["omp_threads"] = threads
            print(json.dumps({"option": name, "repeat": repeat, **result, **loads}), flush=True)


if __name__ == "__main__":
    main()
