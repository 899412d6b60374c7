"""Epoch-plan build time and memory, and DataLoader throughput.

    python bench/plan.py                 # 10^9 tokens in 10^7 documents, then the loader
    python bench/plan.py --docs 1000000  # a smaller synthetic store
    python bench/plan.py --parts stats   # plan statistics only (10^9 tokens, stride T/8)
    python bench/plan.py --parts fill    # ordered vs best_fit packing: fill ratio and packs

Plan: synthetic document lengths only (no token file), uniform in [1, 2·mean), build the
plan of epoch 1 for several configs; peak is the tracemalloc peak during the build (numpy
allocations are traced), retained the plan's own arrays; the lengths array is the input
and not counted. Target: <= 1 s and <= 16 bytes per sample for the default config.
Statistics: `plan_statistics` of the same lengths with stride = window/8 (8 windows read
each token); peak is the tracemalloc peak beyond the plan (traced after it was built), per
sample, against the plan's own retained bytes per sample as the reference. Target: <= 32 B.
Loader: a store of random tokens with log-normal document lengths, batches/s through a
PlanDataLoader (collate included) with 0 and 2 worker processes.
Fill: `pack_strategy=best_fit` against `ordered` (the reference, same run) with pack_size =
window + 1 (each pack one padded sample), on the default corpus (its training store, built
in the cache if missing) and on 10^6 synthetic short documents: fill ratio, packs, build
time, each as best_fit / ordered.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from packlm.cache import DEFAULT_CACHE_DIR
from packlm.config.data import DataConfig
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import PlanSampler
from packlm.data.epoch.statistics import plan_statistics
from packlm.data.store.prepared import prepare_stores
from packlm.data.store.token_store import StoreWriter

PLAN_CONFIGS = {
    "document, unlimited (default)": {},
    "stream, stride T/2": dict(packing="stream", stride=128),
    "none": dict(packing="none"),
    "document, pack_size T+1": dict(pack_size=257),
}


def bench_plans(n_docs: int, mean: int) -> None:
    lengths = np.random.default_rng(0).integers(1, 2 * mean, size=n_docs).astype(np.int64)
    print(
        f"\nplan build: {n_docs:.1e} documents, {lengths.sum():.2e} tokens, window 256, stride 256"
    )
    print(
        f"| {'config':31} | {'samples':>10} | {'time s':>6} | {'peak MB':>7} | {'peak B/sample':>13} | {'kept B/sample':>13} |"
    )
    print(f"|{'-' * 33}|{'-' * 12}|{'-' * 8}|{'-' * 9}|{'-' * 15}|{'-' * 15}|")
    for name, overrides in PLAN_CONFIGS.items():
        cfg = DataConfig(**overrides).validate()
        tracemalloc.start()
        start = time.perf_counter()
        plan = build_plan(lengths, cfg, epoch=1)
        seconds = time.perf_counter() - start
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        n = plan.n_samples
        print(
            f"| {name:31} | {n:>10} | {seconds:>6.2f} | {peak / 1e6:>7.0f} | {peak / n:>13.1f} | {kept / n:>13.1f} |"
        )
        del plan


def bench_statistics(n_docs: int, mean: int) -> None:
    lengths = np.random.default_rng(0).integers(1, 2 * mean, size=n_docs).astype(np.int64)
    sources = (np.arange(n_docs) % 3).astype(np.int32)
    print(f"\nplan statistics: {lengths.sum():.2e} tokens, window 256, stride 32 (T/8), 3 sources")
    print(
        f"| {'config':31} | {'samples':>10} | {'time s':>6} | {'peak MB':>7} | {'peak B/sample':>13} | {'plan B/sample':>13} | {'ratio':>5} |"
    )
    print(f"|{'-' * 33}|{'-' * 12}|{'-' * 8}|{'-' * 9}|{'-' * 15}|{'-' * 15}|{'-' * 7}|")
    for name, overrides in {
        "document, unlimited (default)": {},
        "none, shuffled documents": dict(packing="none", shuffle_documents=True),
    }.items():
        cfg = DataConfig(stride=32, **overrides).validate()
        tracemalloc.start()
        plan = build_plan(lengths, cfg, epoch=1)
        kept = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        tracemalloc.start()
        start = time.perf_counter()
        stats = plan_statistics(plan, sources, ["a", "b", "c"])
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        n = stats["samples"]
        print(
            f"| {name:31} | {n:>10} | {seconds:>6.1f} | {peak / 1e6:>7.0f} | {peak / n:>13.1f} | {kept / n:>13.1f} | {peak / kept:>5.2f} |"
        )
        del plan, stats


def default_corpus_lengths(cache_dir: str) -> np.ndarray:
    """Document lengths of the default corpus's training store (EOS included)."""
    from packlm.config.tokenizer import TokenizerConfig

    prepared = prepare_stores(DataConfig().validate(), TokenizerConfig(), cache_dir, False)
    return np.diff(np.asarray(prepared.open("train").doc_offsets))


def bench_fill(cache_dir: str, buffer: int | None) -> None:
    buffer = buffer or DataConfig().pack_buffer
    rng = np.random.default_rng(2)
    corpora = {
        "default corpus": default_corpus_lengths(cache_dir),
        "10^6 short documents": np.maximum(2, rng.lognormal(3.0, 0.8, 10**6).astype(np.int64)),
    }
    print(f"\nfill: ordered (reference) vs best_fit, pack_buffer {buffer}, pack_size = window + 1")
    print(
        f"| {'corpus':22} | {'docs':>9} | {'mean len':>8} | {'window':>6} | {'fill ordered':>12} "
        f"| {'fill best_fit':>13} | {'fill ratio':>10} | {'packs ordered':>13} "
        f"| {'packs best_fit':>14} | {'packs ratio':>11} | {'best_fit s':>10} | {'time ratio':>10} |"
    )
    print(
        "|" + "|".join("-" * (w + 2) for w in (22, 9, 8, 6, 12, 13, 10, 13, 14, 11, 10, 10)) + "|"
    )
    for name, lengths in corpora.items():
        for window in (256, 1024, 2048):
            out = {}
            for strategy in ("ordered", "best_fit"):
                cfg = DataConfig(window=window, stride=window, pack_size=window + 1,
                                 pack_strategy=strategy, pack_buffer=buffer).validate()  # fmt: skip
                start = time.perf_counter()
                plan = build_plan(lengths, cfg, epoch=1)
                seconds = time.perf_counter() - start
                out[strategy] = (plan_statistics(plan)["fill_ratio"], plan.n_sequences, seconds)
            (fo, po, to), (fb, pb, tb) = out["ordered"], out["best_fit"]
            print(
                f"| {name:22} | {len(lengths):>9} | {lengths.mean():>8.1f} | {window:>6} "
                f"| {fo:>12.4f} | {fb:>13.4f} | {fb / fo:>10.3f} | {po:>13} | {pb:>14} "
                f"| {pb / po:>11.3f} | {tb:>10.3f} | {tb / max(to, 1e-9):>10.1f} |"
            )


def write_store(path: Path, n_tokens: int) -> Path:
    rng = np.random.default_rng(1)
    lengths = np.maximum(1, rng.lognormal(5.5, 1.2, size=n_tokens // 500).astype(np.int64))
    ids = rng.integers(2, 4096, size=int(lengths.sum())).astype(np.uint16)
    ids[np.cumsum(lengths) - 1] = 0  # every document ends with EOS
    with StoreWriter(path, 4096) as w:
        w.add_many(
            ids,
            lengths,
            [f"doc:{i}" for i in range(len(lengths))],
            np.zeros(len(lengths), np.int32),
        )
        return w.finish(
            {
                "eos_id": 0,
                "pad_id": 1,
                "sources": [{"name": "synthetic", "weight": 1.0}],
                "fingerprint": {},
                "counts": {},
            }
        ).path


def bench_loader(n_tokens: int, batches: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_store(Path(tmp) / "store", n_tokens)
        lengths = np.diff(np.load(path / "doc_offsets.npy"))
        print(
            f"\nloader: {len(lengths)} documents, {lengths.sum():.2e} tokens, batch 16, window 256"
        )
        print(
            f"| {'packing':9} | {'workers':>7} | {'batches/s':>9} | {'samples/s':>9} | {'tokens/s':>10} |"
        )
        print(f"|{'-' * 11}|{'-' * 9}|{'-' * 11}|{'-' * 11}|{'-' * 12}|")
        for packing in ("document", "none"):
            cfg = DataConfig(packing=packing, batch_size=16).validate()
            for workers in (0, 2):
                sampler = PlanSampler(
                    lambda e, cfg=cfg: build_plan(lengths, cfg, e), cfg.batch_size
                )
                loader = PlanDataLoader(
                    WindowDataset(path, cfg.window, 1),
                    sampler,
                    packing,
                    {},
                    num_workers=workers,
                    persistent_workers=False,
                )
                it = iter(loader)
                for _ in range(10):  # warm up: workers started, plan built
                    next(it)
                start = time.perf_counter()
                n = 0
                for _ in range(batches):
                    if next(it, None) is None:
                        break
                    n += 1
                rate = n / (time.perf_counter() - start)
                print(
                    f"| {packing:9} | {workers:>7} | {rate:>9.0f} | {rate * 16:>9.0f} | {rate * 16 * 256:>10.2e} |"
                )
                del it


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--docs", type=int, default=10**7, help="documents of the synthetic plan store"
    )
    parser.add_argument(
        "--mean-length", type=int, default=100, help="mean document length (tokens)"
    )
    parser.add_argument(
        "--loader-tokens", type=int, default=10**7, help="tokens of the loader store"
    )
    parser.add_argument("--batches", type=int, default=300, help="batches timed per loader run")
    parser.add_argument(
        "--parts",
        default="plan,stats,loader,fill",
        help="comma-separated: plan, stats, loader, fill",
    )
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="for the default corpus")
    parser.add_argument("--pack-buffer", type=int, default=None, help="best_fit buffer (fill)")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "plan" in parts:
        bench_plans(args.docs, args.mean_length)
    if "stats" in parts:
        bench_statistics(args.docs, args.mean_length)
    if "loader" in parts:
        bench_loader(args.loader_tokens, args.batches)
    if "fill" in parts:
        bench_fill(args.cache_dir, args.pack_buffer)


if __name__ == "__main__":
    main()
