"""What tracing one step costs on a large store (`packlm.trace`).

    python bench/trace.py                       # 10^9 tokens (2 GB, written once, kept)
    python bench/trace.py --tokens 100000000    # a smaller synthetic store

The store is bench/plan.py's synthetic one (log-normal document lengths, mean ~500 tokens,
random ids below 4096), written in chunks so no temporary holds all its tokens. Timed: a fresh
Tracer (store opened, doc_ids read, epoch plans built) tracing one step of epoch 0 and one of
epoch 2, for the default data config (window 128, batch 32, document packing, shuffled);
then the next batch with the same Tracer (its plans and doc ids already loaded).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from packlm.commands.trace import Schedule, Tracer
from packlm.config.data import DataConfig
from packlm.data.plans import EpochPlans
from packlm.data.store.prepared import PreparedData
from packlm.data.store.token_store import StoreWriter, TokenStore, write_store

CHUNK = 10**8  # tokens generated at once


def synthetic_store(path: Path, n_tokens: int) -> TokenStore:
    if (path / "manifest.json").is_file():
        return TokenStore.open(path)
    rng = np.random.default_rng(1)
    with StoreWriter(path, 4096) as w:
        while w.n_tokens < n_tokens:
            lengths = np.maximum(1, rng.lognormal(5.5, 1.2, size=CHUNK // 500).astype(np.int64))
            ids = rng.integers(2, 4096, size=int(lengths.sum()), dtype=np.uint16)
            ids[np.cumsum(lengths) - 1] = 0  # every document ends with EOS
            first = w.n_docs
            names = [
                f"0:synthetic/part{first // 10**6}.jsonl:{first + i}" for i in range(len(lengths))
            ]
            w.add_many(ids, lengths, names, np.zeros(len(lengths), np.int32))
        manifest = {"eos_id": 0, "pad_id": 1, "sources": [{"name": "synthetic"}]}
        return w.finish({**manifest, "fingerprint": {"kind": "bench"}, "counts": {}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=10**9)
    parser.add_argument("--dir", default="/tmp/packlm-bench-trace")
    args = parser.parse_args()
    root = Path(args.dir) / f"{args.tokens}"
    t = time.perf_counter()
    store = synthetic_store(root / "train", args.tokens)
    val = root / "val"
    if not val.is_dir():
        write_store(val, [np.array([5, 6, 0])], 4096, 0, 1)
    print(f"store: {store.n_tokens:.3e} tokens, {store.n_docs:.3e} documents "
          f"({time.perf_counter() - t:.1f} s to write or open)")  # fmt: skip
    prepared = PreparedData(None, root, store.path, val, store.manifest, None)
    data = DataConfig().validate()
    for epoch, batch in ((0, 1000), (2, 5)):
        t = time.perf_counter()
        tracer = Tracer(EpochPlans(prepared=prepared, data=data, progress=False), Schedule())
        trace = tracer.batch(epoch, batch)
        print(f"epoch {epoch} batch {batch}: {len(trace['rows'])} rows traced in "
              f"{time.perf_counter() - t:.2f} s (fresh process state: store, plans, doc ids)")  # fmt: skip
        t = time.perf_counter()
        tracer.batch(epoch, batch + 1)
        print(f"  the next batch with the same Tracer: {time.perf_counter() - t:.3f} s")


if __name__ == "__main__":
    main()
