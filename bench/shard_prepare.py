"""Preparing one large JSONL file in 1 process against 4 shard processes (data.shard=i/4).

    python bench/shard_prepare.py [--size-mb 1000] [--shards 4] [--vocab-size 4096] [--tmp DIR]

Writes a synthetic JSONL file of --size-mb MB (records of the stdlib corpus, lightly mutated
as bench/store.py --large does, generated offline and deterministically) in a temporary
directory that is deleted afterwards. The tokenizer is trained first, on the stdlib corpus,
and given to every run as `tokenizer.path`, so the timed runs only read, split, encode, write
and verify (no tokenizer training). Rows, each timed from start to the end of its last process:
1. `python -m packlm.prepare data.sources=[F]`: one store, every core for its encoding workers;
2. --shards processes `python -m packlm.prepare data.sources=[F] data.shard=i/N` started at
   once (as `-m data.shard=0/4,...` through a parallel launcher would), each cutting its own
   piece of the one file between records and using every core too.
Then `data.shards=N` reads the shards as one and its documents and tokens are checked equal
to the one store's. CPU s counts every process and its encoding workers, per process too
(`os.wait4`). On a machine with fewer cores than shards the shards can only share the
cores, so the wall time is about the one process's: the speedup is across machines, where
each shard's own CPU s against the one process's is the ratio that carries over (CPU time
depends less than wall time on what else the machine runs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.corpus import Corpus
from packlm.data.store.default_corpus import iter_default_documents
from packlm.data.store.encode import available_cores
from packlm.tokenizer.obtain import get_tokenizer

SWAPS = ("ea", "tsnr", "oilu")  # letter pairs swapped, both ways (bench/store.py's mutation)


def write_jsonl(path: Path, size_mb: float) -> int:
    """Records of 200 B to 20 kB cut from the stdlib files, each copy mutated, until size_mb."""
    rng, docs = random.Random(0), [text for _, text in iter_default_documents()]
    tables = [str.maketrans("", "")] + [
        str.maketrans(p + p[::-1], p[::-1] + p) for p in SWAPS
    ]  # fmt: skip
    total, n = 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while total < size_mb * 1e6:
            text = rng.choice(docs)
            start = rng.randrange(max(1, len(text) - 200))
            piece = text[start : start + rng.randint(200, 20000)].translate(rng.choice(tables))
            line = json.dumps({"text": f"# record {n}\n{piece}"}) + "\n"
            f.write(line)
            total, n = total + len(line.encode()), n + 1
    return n


def tokenizer_dir(vocab_size: int, cache: Path) -> Path:
    corpus = Corpus.from_config(DataConfig())
    cfg = TokenizerConfig(vocab_size=vocab_size)
    _, where = get_tokenizer(
        cfg, corpus.fingerprint(training_only=True), corpus.training_texts, cache, progress=False
    )
    return where


def run(commands: list[list[str]], logs: Path) -> dict:
    """Start the commands at once: wall seconds until the last ends; per process its own
    seconds and CPU s (with its encoding workers: `os.wait4`'s usage); stdouts."""
    start = time.perf_counter()
    procs = {}
    for k, cmd in enumerate(commands):
        out, err = (open(logs / f"run{len(commands)}_{k}.{x}", "w+")  # noqa: SIM115 (closed below)
                    for x in ("out", "log"))  # fmt: skip
        procs[subprocess.Popen(cmd, stdout=out, stderr=err, text=True).pid] = (k, out, err)
    seconds, cpu, outs = [0.0] * len(procs), [0.0] * len(procs), [""] * len(procs)
    for _ in range(len(procs)):
        pid, status, usage = os.wait4(-1, 0)
        k, out, err = procs[pid]
        seconds[k], cpu[k] = time.perf_counter() - start, usage.ru_utime + usage.ru_stime
        out.seek(0)
        outs[k] = out.read()
        out.close(), err.close()
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{commands[k][3:]} failed ({status}); see {err.name}")
    return {"seconds": max(seconds), "each": seconds, "cpu": sum(cpu), "cpus": cpu, "outs": outs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=1000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--tmp", default=None, help="where the temporary directory goes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="packlm-shards-", dir=args.tmp) as tmp:
        root = Path(tmp)
        path = root / "corpus.jsonl"
        t0 = time.perf_counter()
        records = write_jsonl(path, args.size_mb)
        written, size = time.perf_counter() - t0, path.stat().st_size
        tok = tokenizer_dir(args.vocab_size, root / "tok-cache")
        base = [sys.executable, "-m", "packlm.prepare", f"data.sources=[{path}]",
                f"tokenizer.path={tok}"]  # fmt: skip
        load = os.getloadavg()
        one = run([[*base, f"cache_dir={root}/one"]], root)
        n = args.shards
        cache = f"cache_dir={root}/shards"
        shards = run([[*base, cache, f"data.shard={i}/{n}"] for i in range(n)], root)
        union = run([[*base, cache, f"data.shards={n}"]], root)  # reads the n shards as one
        load_after = os.getloadavg()
    counts = []
    for out in (one["outs"][0], union["outs"][0]):
        report = json.loads(out)
        counts.append({s: (report[s]["counts"]["documents"], report[s]["counts"]["tokens"])
                       for s in ("train", "val")})  # fmt: skip
    pieces = [json.loads(o)["train"]["counts"]["documents"] for o in shards["outs"]]
    print(f"one JSONL file: {size / 1e6:.0f} MB, {records:,} records (written in {written:.0f} "
          f"s), vocab {args.vocab_size} (tokenizer given: no training timed), "
          f"{available_cores()} cores; load average {load[0]:.2f} before, {load_after[0]:.2f} "
          "after")  # fmt: skip
    print(f"{'':42} {'seconds':>8} {'CPU s':>8}  per process (seconds / CPU s)")
    rows = (("prepare, 1 process", one), (f"prepare, {n} shard processes at once", shards),
            (f"data.shards={n} (the {n} opened as one)", union))  # fmt: skip
    for name, r in rows:
        each = ", ".join(f"{s:.1f} / {c:.1f}" for s, c in zip(r["each"], r["cpus"], strict=True))
        print(
            f"{name:42} {r['seconds']:8.1f} {r['cpu']:8.1f}  {each if len(r['each']) > 1 else ''}"
        )
    print(
        f"{n} shard processes / 1 process: wall {shards['seconds'] / one['seconds']:.2f}x, CPU "
        f"{shards['cpu'] / one['cpu']:.2f}x; the largest shard's CPU / the 1 process's: "
        f"{max(shards['cpus']) / one['cpu']:.2f}x (a shard per machine); training documents "
        f"per shard {pieces}; union == one store (documents, tokens): {counts[0] == counts[1]}"
    )
    if counts[0] != counts[1]:
        raise SystemExit(f"the shards differ from the one store: {counts}")


if __name__ == "__main__":
    main()
