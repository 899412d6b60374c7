"""Token-store build throughput on the default corpus, against tiktoken on the same documents;
and a large corpus through `python -m packlm.prepare`, against Hugging Face `tokenizers`.

    python bench/store.py [--vocab-size 4096] [--repeat 3]
    python bench/store.py --large [--size-mb 1000] [--vocab-size 4096]

Rows: the packlm store build (both splits: read, split, encode, write) in-process and
with every core; tiktoken encoding the same documents single-threaded, with an Encoding
built offline from the packlm tokenizer's own ranks (nothing is downloaded). Throughput is
MB of source text per second; CPU s counts the workers too (on a busy machine compare
CPU s, not seconds); peak RSS is the high-water mark of the main process and of the
largest worker. Each row runs in a fresh process so the peaks do not mix. The tokenizer
is trained once and cached in .cache/packlm-bench.

--large: a synthetic corpus of --size-mb MB (the stdlib corpus, copied with light mutation:
each copy of a file swaps a few letter pairs, one of four fixed swaps, so the vocabulary of
pre-tokens stays bounded, and gets a header line), one file per document, generated offline.
Rows: `python -m packlm.prepare` (tokenizer training, both stores, the verifying pass) and HF
`tokenizers` (ByteLevel BPE, GPT-2 pattern, same vocab size: training from the same documents,
then encode_batch over them), each a fresh process; wall time, CPU, and the peak of the summed
RSS and PSS of the whole process tree (main + workers; PSS splits pages a fork shares, so it
is the memory really used) sampled every 100 ms; ratios packlm / HF. Needs psutil.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.build import build_stores
from packlm.data.store.corpus import Corpus
from packlm.data.store.encode import available_cores
from packlm.data.store.split_state import StoreHeader
from packlm.tokenizer.obtain import get_tokenizer
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
    cmd = [sys.executable, __file__, "--row", row, "--vocab-size", str(vocab_size)]
    cmd += ["--workers", str(workers)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per row")
    parser.add_argument("--large", action="store_true", help="the large-corpus case")
    parser.add_argument("--size-mb", type=float, default=1000, help="--large corpus size")
    parser.add_argument("--row", choices=["packlm", "tiktoken", "hf"], help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row == "hf":
        print(json.dumps(run_hf(Path(args.corpus), args.vocab_size)))
        return
    if args.large:
        return large(args.size_mb, args.vocab_size)
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


# ---- the large corpus: prepare against HF tokenizers, whole process trees -------------------


def write_corpus(root: Path, size_mb: float) -> int:
    """Copies of the stdlib files, lightly mutated, one file per document, until size_mb."""
    from packlm.data.store.default_corpus import iter_default_documents

    rng, docs = random.Random(0), [text for _, text in iter_default_documents()]
    swaps = [str.maketrans("", "")] + [
        str.maketrans(pairs + pairs[::-1], pairs[::-1] + pairs)
        for pairs in ("ea", "tsnr", "oilu")  # a few letter pairs swapped, both ways
    ]
    total, n = 0, 0
    while total < size_mb * 1e6:
        for text in rng.sample(docs, len(docs)):
            data = f"# copy {n}\n{text.translate(rng.choice(swaps))}".encode()
            folder = root / f"{n // 1000:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{n}.txt").write_bytes(data)
            total, n = total + len(data), n + 1
            if total >= size_mb * 1e6:
                break
    return n


def corpus_texts(root: Path):
    for path in sorted(root.rglob("*.txt")):
        yield path.read_text(encoding="utf-8")


def run_hf(root: Path, vocab_size: int) -> dict:
    """HF tokenizers: train a ByteLevel BPE on the documents, then encode them all."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(resolve_pattern("gpt2")), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    tok.train_from_iterator(corpus_texts(root), trainer=trainer)
    tokens, batch = 0, []
    for text in corpus_texts(root):
        batch.append(text)
        if len(batch) == 1000:
            tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(batch))
            batch = []
    tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(batch))
    return {"tokens": tokens}


def tree_peak(cmd: list[str], log: Path) -> dict:
    """Run `cmd`; wall time, CPU, peak summed RSS and PSS (MB) of its process tree."""
    import psutil

    cpu0, start = _cpu(), time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        root, peak_rss, peak_pss = psutil.Process(proc.pid), 0, 0
        while proc.poll() is None:
            rss = pss = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    info = p.memory_full_info()
                    rss, pss = rss + info.rss, pss + info.pss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            time.sleep(0.1)
        out = proc.communicate()[0]
    if proc.returncode:
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}); see {log}")
    return {"seconds": time.perf_counter() - start, "cpu": _cpu() - cpu0, "out": out,
            "rss": peak_rss / 2**20, "pss": peak_pss / 2**20}  # fmt: skip


def large(size_mb: float, vocab_size: int) -> None:
    with tempfile.TemporaryDirectory(prefix="packlm-large-") as tmp:
        root = Path(tmp) / "corpus"
        docs = write_corpus(root, size_mb)
        nbytes = sum(p.stat().st_size for p in root.rglob("*.txt"))
        prepare = [sys.executable, "-m", "packlm.prepare", f"data.sources=[{root}]",
                   f"tokenizer.vocab_size={vocab_size}", f"cache_dir={tmp}/cache"]  # fmt: skip
        ours = tree_peak(prepare, Path(tmp) / "prepare.log")
        rows = json.loads(ours["out"])["summary"]
        hf = tree_peak([sys.executable, __file__, "--row", "hf", "--corpus", str(root),
                        "--vocab-size", str(vocab_size)], Path(tmp) / "hf.log")  # fmt: skip
    tokens = sum(r["tokens"] for r in rows.values())
    print(f"large corpus: {nbytes / 1e6:.0f} MB in {docs} documents, vocab {vocab_size}, "
          f"{available_cores()} cores, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(
        f"{'':44} {'seconds':>8} {'CPU s':>7} {'tree RSS MB':>11} {'tree PSS MB':>11} {'tokens':>12}"
    )
    for name, r, n in (
        ("packlm prepare (train + both stores + verify)", ours, tokens),
        ("HF tokenizers (train + encode)", hf, json.loads(hf["out"])["tokens"]),
    ):
        print(
            f"{name:44} {r['seconds']:8.1f} {r['cpu']:7.1f} {r['rss']:11.0f} {r['pss']:11.0f} {n:12,}"
        )
    print(f"packlm / HF: time {ours['seconds'] / hf['seconds']:.2f}x, CPU {ours['cpu'] / hf['cpu']:.2f}x, "
          f"peak PSS {ours['pss'] / hf['pss']:.2f}x, peak RSS {ours['rss'] / hf['rss']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
