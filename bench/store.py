"""Token-store build throughput on the default corpus, against tiktoken on the same documents.

    python bench/store.py [--vocab-size 4096] [--repeat 3]

Rows: the packlm store build (both splits: read, split, encode, write) in-process and
with every core; tiktoken encoding the same documents single-threaded, with an Encoding
built offline from the packlm tokenizer's own ranks (nothing is downloaded). Throughput is
MB of source text per second; CPU s counts the workers too (on a busy machine compare
CPU s, not seconds); peak RSS is the high-water mark of the main process and of the
largest worker. Each row runs in a fresh process so the peaks do not mix. The tokenizer
is trained once and cached in .cache/packlm-bench.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packlm.data.config import DataConfig
from packlm.data.store.build import StoreHeader, build_stores
from packlm.data.store.corpus import Corpus
from packlm.data.store.encode import available_cores
from packlm.tokenizer.cache import get_tokenizer
from packlm.tokenizer.config import TokenizerConfig
from packlm.tokenizer.pretokenize import resolve_pattern

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "packlm-bench"


def tokenizer_and_corpus(vocab_size: int):
    corpus = Corpus.from_config(DataConfig())
    cfg = TokenizerConfig(vocab_size=vocab_size)
    tok, _ = get_tokenizer(
        cfg, corpus.fingerprint(training_only=True), corpus.training_texts, CACHE, progress=False
    )
    return tok, corpus


def run_packlm(vocab_size: int, workers: int) -> dict:
    tok, corpus = tokenizer_and_corpus(vocab_size)
    ids = tok.special_token_ids
    header = StoreHeader({"bench": True}, ids["<|endoftext|>"], ids["<|pad|>"])
    with tempfile.TemporaryDirectory() as tmp:
        cpu0, start = _cpu(), time.perf_counter()
        train, val = build_stores(
            corpus, tok, header, Path(tmp) / "stores", workers, progress=False
        )
        seconds, cpu = time.perf_counter() - start, _cpu() - cpu0
        nbytes = train.manifest["counts"]["bytes"] + val.manifest["counts"]["bytes"]
        tokens = train.n_tokens + val.n_tokens
    return {"seconds": seconds, "cpu": cpu, "bytes": nbytes, "tokens": tokens, **_peak_rss()}


def run_tiktoken(vocab_size: int) -> dict:
    import tiktoken

    tok, corpus = tokenizer_and_corpus(vocab_size)
    specials = tok.special_token_ids
    ranks = {b: i for i, b in tok.vocab.items() if i not in specials.values()}
    enc = tiktoken.Encoding(
        "packlm-bench",
        pat_str=resolve_pattern(tok.pattern),
        mergeable_ranks=ranks,
        special_tokens=specials,
    )
    texts = [t for t in corpus.training_texts()]  # the split does not matter for throughput
    texts += [d.text for d in _val_docs(corpus)]
    cpu0, start = _cpu(), time.perf_counter()
    encoded = [enc.encode_ordinary(t) for t in texts]
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu0
    same = sum(a == tok.encode_ordinary(t) for a, t in zip(encoded, texts, strict=True))
    nbytes = sum(len(t.encode()) for t in texts)
    tokens = sum(len(e) + 1 for e in encoded)
    return {
        "seconds": seconds,
        "cpu": cpu,
        "bytes": nbytes,
        "tokens": tokens,
        "same_ids": same / len(texts),
        **_peak_rss(),
    }


def _val_docs(corpus: Corpus):
    from packlm.data.store.sources import ReadCounts, iter_documents

    return [
        d
        for d in iter_documents(corpus.sources, corpus.options, ReadCounts())
        if corpus.goes_to_validation(d.text.encode())
    ]


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the encoding workers)."""
    return sum(
        r.ru_utime + r.ru_stime
        for r in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )


def _peak_rss() -> dict:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"peak_rss_mb": own, "peak_worker_rss_mb": child}


def measure(row: str, vocab_size: int, workers: int = 0) -> dict:
    """One row in a fresh interpreter (a clean peak RSS)."""
    cmd = [
        sys.executable,
        __file__,
        "--row",
        row,
        "--vocab-size",
        str(vocab_size),
        "--workers",
        str(workers),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per row")
    parser.add_argument("--row", choices=["packlm", "tiktoken"], help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row == "packlm":
        print(json.dumps(run_packlm(args.vocab_size, args.workers)))
        return
    if args.row == "tiktoken":
        print(json.dumps(run_tiktoken(args.vocab_size)))
        return

    tokenizer_and_corpus(args.vocab_size)  # train and cache the tokenizer outside the timings
    cores = available_cores()
    rows = [
        ("packlm store build, in-process", "packlm", 0),
        (f"packlm store build, {cores} workers", "packlm", cores),
        ("tiktoken encode_ordinary, 1 thread", "tiktoken", 0),
    ]
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in rows}
    for _ in range(args.repeat):  # rows interleaved: a busy moment on a shared machine hits all
        for name, row, workers in rows:
            runs[name].append(measure(row, args.vocab_size, workers))
    results = {name: min(r, key=lambda x: x["seconds"]) for name, r in runs.items()}
    base = results["tiktoken encode_ordinary, 1 thread"]
    base_mbs = base["bytes"] / 1e6 / base["seconds"]
    load = os.getloadavg()[0]
    print(
        f"default corpus: {base['bytes'] / 1e6:.1f} MB, vocab {args.vocab_size}, {cores} cores, load {load:.1f}"
    )
    print(
        f"{'':38} {'seconds':>8} {'CPU s':>6} {'MB/s':>7} {'vs tiktoken':>11} {'peak RSS MB':>11} {'worker RSS MB':>13}"
    )
    for name, r in results.items():
        mbs = r["bytes"] / 1e6 / r["seconds"]
        worker = f"{r['peak_worker_rss_mb']:.0f}" if "workers" in name else "-"
        print(
            f"{name:38} {r['seconds']:8.2f} {r['cpu']:6.2f} {mbs:7.2f} {mbs / base_mbs:10.2f}x "
            f"{r['peak_rss_mb']:11.0f} {worker:>13}"
        )
    print(f"tiktoken ids equal packlm's for {base['same_ids']:.1%} of documents")


if __name__ == "__main__":
    main()
