"""Loader benchmark: tokens per second the train DataLoader delivers with no model at all.

    python bench/loader.py [--batches 40] [--workers 1] [--tokens 4000000]

One synthetic store (documents of log-normal length, median ~400 tokens, EOS included),
then for T = 1024 and 2048, packing document and stream, packs ordered (unlimited) or
best_fit (pack_size T+1), with and without a two-phase curriculum (T/2, then T): the
input tokens (B*T) per second of wall time that `PackedDataModule.train_dataloader()`
hands out, after a warm-up batch, with `--workers` worker processes (0: in this process).
Memory: the bytes one batch sends from a worker per sample (the numpy arrays of
`packlm.batch`), and the resident memory a worker process holds (psutil; memmapped store
pages it touched included), for one worker.
On a shared machine the figures move with the other load: compare rows of one run only.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from packlm.data.datamodule import PackedDataModule
from packlm.data.store.prepared import PreparedData
from packlm.data.store.token_store import write_store

VOCAB = 4096


def synthetic_store(root: Path, tokens: int, seed: int = 0) -> PreparedData:
    rng = np.random.default_rng(seed)
    lengths = np.maximum(2, rng.lognormal(np.log(400), 1.0, size=tokens // 400)).astype(np.int64)
    ids = rng.integers(0, VOCAB - 2, int(lengths.sum()), dtype=np.int64)
    docs = np.split(ids, np.cumsum(lengths)[:-1])
    for d in docs:
        d[-1] = VOCAB - 2  # EOS
    train = write_store(root / "train", docs, VOCAB, VOCAB - 2, VOCAB - 1)
    val = write_store(root / "val", docs[:20], VOCAB, VOCAB - 2, VOCAB - 1)
    return PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)


def worker_rss() -> int:
    """Resident bytes of this process's children, the loader's workers (0 without psutil)."""
    try:
        import psutil
    except ImportError:
        return 0
    return sum(c.memory_info().rss for c in psutil.Process().children(recursive=True))


def measure(prepared, window: int, packing: str, strategy: str, curriculum: bool, args) -> dict:
    keys = dict(window=window, stride=window, packing=packing, batch_size=args.batch_size)
    keys.update(num_workers=args.workers, seed=0)
    if strategy == "best_fit":
        keys.update(pack_size=window + 1, pack_strategy="best_fit")
    if curriculum:  # half the window for the first ~half of the batches, then the full one
        until = args.batches * args.batch_size * window // 2
        del keys["window"], keys["stride"]
        keys["curriculum"] = [{"window": window // 2, "until": until}, {"window": window}]
    dm = PackedDataModule(prepared=prepared, progress=False, **keys)
    loader = dm.train_dataloader()
    it = iter(loader)
    first = next(it)  # warm-up: plan built, workers started
    per_sample = sum(v.nbytes for v in first.values()) / len(first["input_ids"])
    tokens, start = 0, time.perf_counter()
    for _ in range(args.batches):
        batch = next(it, None)
        if batch is None:
            break
        tokens += batch["input_ids"].numel()
    seconds = time.perf_counter() - start
    rss = worker_rss()
    del it
    return {"tokens_per_s": tokens / seconds, "bytes_per_sample": per_sample, "worker_rss": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=4_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prepared = synthetic_store(Path(tmp), args.tokens)
        print(f"store: {args.tokens:,} tokens; B={args.batch_size}, "
              f"{args.batches} batches, {args.workers} worker(s)")  # fmt: skip
        print(f"{'T':>5} {'packing':9} {'packs':9} {'curric.':7} {'tokens/s':>11} "
              f"{'B/sample':>9} {'worker RSS':>11}")  # fmt: skip
        for window in (1024, 2048):
            for packing in ("document", "stream"):
                for strategy in ("ordered", "best_fit"):
                    for curriculum in (False, True):
                        r = measure(prepared, window, packing, strategy, curriculum, args)
                        print(f"{window:>5} {packing:9} {strategy:9} {str(curriculum):7} "
                              f"{r['tokens_per_s']:>11,.0f} {r['bytes_per_sample']:>9,.0f} "
                              f"{r['worker_rss'] / 2**20:>9.1f} MiB", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
