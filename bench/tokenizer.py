"""Tokenizer benchmark: packlm's BPE trainer and encoders against Hugging Face `tokenizers`
and tiktoken, on the embedded default corpus (the stdlib's .py files, ~12 MB).

    python bench/tokenizer.py                 # train at vocab 32768, encode, print the table
    python bench/tokenizer.py --vocab-size 8192 --repeat 3
    python bench/tokenizer.py --load   # GPT-2's files to the first encode: packlm, tiktoken, HF

Each training run is its own subprocess; the parent samples the whole process tree
(the trainer and its worker processes) every 20 ms and reports the peak of
the summed RSS and of the summed PSS. RSS counts a page shared by a forked worker and
its parent in both; PSS splits it between them, so the PSS sum is the memory really
used. Wall time is measured inside the child around the training call only (reading
the corpus files happens inside it, lazily, for every trainer alike).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SPECIAL = "<|endoftext|>"
GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden" / "bpe" / "corpus.en"
GPT2_FILES = GOLDEN.with_name("gpt2_vocab.json"), GOLDEN.with_name("gpt2_merges.txt")
TEXT = "Hello world"  # what each load encodes first
NEW_TEXT = "Hello w\u0c5crld"  # U+0C5C: a letter since Unicode 16, not in tiktoken 0.14's tables


def documents():
    from packlm.data.store.default_corpus import iter_default_documents

    return (text for _, text in iter_default_documents())


# ---- children: one job each, result as JSON on stdout ----------------------------------


def child_hf_train(vocab_size: int, out: str | None) -> dict:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from packlm.tokenizer import GPT2_PATTERN

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(GPT2_PATTERN), behavior="isolated"),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[SPECIAL],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    start = time.perf_counter()
    tok.train_from_iterator(documents(), trainer=trainer)
    return {"wall": time.perf_counter() - start}


def child_packlm_train(vocab_size: int, out: str | None, workers: int | None = None) -> dict:
    from packlm.tokenizer import Tokenizer, train_bpe_from_iterator

    start = time.perf_counter()
    vocab, merges = train_bpe_from_iterator(documents(), vocab_size, [SPECIAL], num_workers=workers)
    wall = time.perf_counter() - start
    if out:
        Tokenizer(vocab, merges, [SPECIAL]).save(out)
    return {"wall": wall, "merges": len(merges)}


def child_small(repeat: int) -> dict:
    from packlm.tokenizer import train_bpe

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        train_bpe(GOLDEN, 500, [SPECIAL])
        times.append(time.perf_counter() - start)
    return {"wall": min(times)}


def child_encode(saved: str, repeat: int) -> dict:
    """MB/s of UTF-8 input per encoder, every one checked against packlm's Python path."""
    import tiktoken
    import tokenizers

    from packlm.tokenizer import Tokenizer

    docs = list(documents())
    megabytes = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    fast = Tokenizer.load(saved)
    pure = Tokenizer.load(saved, engine="python")
    fast.encode("warm up")
    specials = set(fast.special_token_ids.values())
    ranks = {fast.token_bytes(i): i for i in range(fast.vocab_size) if i not in specials}
    tik = tiktoken.Encoding(
        "bench", pat_str=fast.pattern_regex, mergeable_ranks=ranks, special_tokens={}
    )
    with tempfile.TemporaryDirectory() as tmp:
        fast.save_hf(Path(tmp) / "tokenizer.json")
        hf = tokenizers.Tokenizer.from_file(str(Path(tmp) / "tokenizer.json"))

    def run(name, fn):
        best, ids = float("inf"), None
        for _ in range(repeat):
            start = time.perf_counter()
            ids = fn()
            best = min(best, time.perf_counter() - start)
        return name, best, ids

    results = [
        run("packlm encode (Python path)", lambda: [pure.encode(d) for d in docs]),
        run(f"packlm encode ({fast.engine} path)", lambda: [fast.encode(d) for d in docs]),
        run("tiktoken encode_ordinary, 1 thread", lambda: [tik.encode_ordinary(d) for d in docs]),
        run("tokenizers encode, 1 doc at a time", lambda: [e.ids for e in map(hf.encode, docs)]),
        run("tokenizers encode_batch (all cores)", lambda: [e.ids for e in hf.encode_batch(docs)]),
    ]
    reference = results[0][2]
    rows = [{"name": n, "wall": w, "mb_s": megabytes / w, "same_ids": ids == reference}
            for n, w, ids in results]  # fmt: skip
    return {"rows": rows, "megabytes": megabytes}


def child_load(which: str, root: str, cache_dir: str, text: str = TEXT) -> dict:
    """Seconds from the files (GPT-2's, or packlm's saved copy, a tokenizer.json or a
    .tiktoken file of the same vocabulary under `root`) to the first encode of `text`, with
    every import done before (packlm's lazy ones too). cache_dir "-": none, else packlm's."""
    import tiktoken
    import tokenizers
    from tiktoken.load import load_tiktoken_bpe

    import packlm.tokenizer.obtain  # noqa: F401
    from packlm.tokenizer import GPT2_PATTERN, Tokenizer
    from packlm.tokenizer.formats import from_unicode
    from packlm.tokenizer.obtain import load_path

    vocab, merges = GPT2_FILES
    root = Path(root)
    cache = None if cache_dir == "-" else cache_dir

    def hf() -> list[int]:
        tok = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(vocab), str(merges)))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
        return tok.encode(text).ids

    def tik() -> list[int]:
        table = json.loads(vocab.read_text(encoding="utf-8"))
        ranks = {from_unicode(t): i for t, i in table.items() if t != SPECIAL}
        enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                special_tokens={SPECIAL: table[SPECIAL]})  # fmt: skip
        return enc.encode(text)

    def tik_file() -> list[int]:
        ranks = load_tiktoken_bpe(str(root / "gpt2.tiktoken"))
        enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                special_tokens={SPECIAL: len(ranks)})  # fmt: skip
        return enc.encode(text)

    loaders = {
        "hf": hf, "tiktoken": tik, "tiktoken-file": tik_file,
        "hf-json": lambda: tokenizers.Tokenizer.from_file(str(root / "tokenizer.json"))
        .encode(text).ids,
        "hf-export": lambda: tokenizers.Tokenizer.from_file(str(root / "export.json"))
        .encode(text).ids,
        "packlm-files": lambda: Tokenizer.from_files(vocab, merges, [SPECIAL], cache_dir=cache)
        .encode(text),
        "packlm-saved": lambda: Tokenizer.load(root / "saved", cache_dir=cache).encode(text),
        "packlm-json": lambda: load_path(root / "tokenizer.json", special_tokens=[SPECIAL],
                                         cache_dir=cache).encode(text),
        "packlm-export": lambda: load_path(root / "export.json", special_tokens=[SPECIAL],
                                           cache_dir=cache).encode(text),
        "packlm-tiktoken": lambda: load_path(root / "gpt2.tiktoken", special_tokens=[SPECIAL],
                                             cache_dir=cache).encode(text),
    }  # fmt: skip
    start, cpu = time.perf_counter(), time.process_time()
    ids = loaders[which]()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"wall": wall, "cpu": cpu, "ids": list(ids)}


COLD, WARM = "  cache_dir, first load (empty)", "  cache_dir, tables kept"
LOADERS = {  # (loader, cache_dir kind) -> row
    ("hf", "-"): "tokenizers BPE.from_file", ("tiktoken", "-"): "tiktoken Encoding from vocab.json",
    ("packlm-files", "-"): "packlm Tokenizer.from_files", ("packlm-files", "cold"): COLD,
    ("packlm-files", "warm"): WARM,
    ("packlm-files", "first"): "  no cache_dir, no engine_patterns store",
    ("hf", "new"): "tokenizers, a letter tiktoken lacks",
    ("packlm-files", "first-new"): "  packlm, no store, that letter",
    ("packlm-saved", "-"): "packlm Tokenizer.load (saved dir)",
    ("packlm-saved", "cold"): COLD, ("packlm-saved", "warm"): WARM,
    ("hf-json", "-"): "tokenizers Tokenizer.from_file (.json)",
    ("packlm-json", "-"): "packlm tokenizer.path=tokenizer.json", ("packlm-json", "warm"): WARM,
    ("hf-export", "-"): "tokenizers from_file (packlm's export)",
    ("packlm-export", "-"): "packlm tokenizer.path=(its export).json",
    ("packlm-export", "warm"): WARM,
    ("tiktoken-file", "-"): "tiktoken load_tiktoken_bpe (.tiktoken)",
    ("packlm-tiktoken", "-"): "packlm tokenizer.path=gpt2.tiktoken",
    ("packlm-tiktoken", "warm"): WARM,
}  # fmt: skip
REFERENCE = {"packlm-json": "hf-json", "packlm-export": "hf-export",
             "packlm-tiktoken": "tiktoken-file"}  # else "hf"  # fmt: skip


def write_load_files(root: Path) -> None:
    """GPT-2's vocabulary as packlm's saved directory, a tokenizer.json written by HF
    `tokenizers` itself (indented, merges as pairs), packlm's own export (compact, merges as
    strings) and a .tiktoken file (tiktoken's dump format)."""
    import base64

    import tokenizers

    from packlm.tokenizer import Tokenizer

    tok = Tokenizer.from_files(*GPT2_FILES, [SPECIAL])
    tok.save(root / "saved")
    tok.save_hf(root / "export.json")
    hf = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(*map(str, GPT2_FILES)))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.add_special_tokens([SPECIAL])
    hf.save(str(root / "tokenizer.json"))
    ranks = sorted(tok._tiktoken_ranks().items(), key=lambda item: item[1])
    lines = [f"{base64.b64encode(t).decode()} {i}\n" for t, i in ranks]
    (root / "gpt2.tiktoken").write_text("".join(lines), encoding="ascii")


def load_table(repeat: int) -> None:
    """The loading benchmark: each loader in fresh processes, median of `repeat`, its
    ratios against its reference (HF `tokenizers` reading GPT-2's files, or the same
    library reading the same file). A "cold" run gets a new empty cache_dir; "warm" runs
    share one that a first load filled; a "first" run has no cache_dir and an empty user
    cache (`XDG_CACHE_HOME`): the first load on a machine, which checks the text's
    characters in tiktoken (`engine_pattern.SeenCharacters`) and fixes the pattern for one
    classed otherwise than in `regex` ("new": a text with such a letter). CPU
    time is the child's own, steadier than wall time on a busy machine."""
    with tempfile.TemporaryDirectory() as tmp:
        root, warm = Path(tmp), str(Path(tmp) / "warm")
        write_load_files(root)
        for which in ("packlm-files", "packlm-saved", "packlm-json", "packlm-export",
                      "packlm-tiktoken"):  # fmt: skip
            run_child(["load", which, tmp, warm])  # fills the warm cache_dir

        runs, dirs = {key: [] for key in LOADERS}, {"-": "-", "new": "-", "warm": warm}
        dirs |= {"first": "-", "first-new": "-"}
        for k in range(repeat):  # round robin: every row sees the same machine load
            for w, kind in LOADERS:  # a cold run: a new, empty cache_dir
                cache = dirs.get(kind) or str(root / f"{w}-cold{k}")
                env = {**os.environ, "XDG_CACHE_HOME": str(root / f"user{k}")}
                text = NEW_TEXT if kind.endswith("new") else TEXT
                runs[w, kind].append(
                    run_child(["load", w, tmp, cache, text], env if "first" in kind else None)
                )
    median = {key: {m: statistics.median(r[m] for r in rs) for m in ("wall", "cpu")}
              for key, rs in runs.items()}  # fmt: skip
    print(f"{'files -> first encode':40} {'wall s':>7} {'x ref':>6} {'spread':>11} "
          f"{'CPU s':>7} {'x ref':>6}  same ids  reference")  # fmt: skip
    for key, name in LOADERS.items():
        ref = (REFERENCE.get(key[0], "hf"), "new" if key[1].endswith("new") else "-")
        wall, cpu = median[key]["wall"], median[key]["cpu"]
        low, high = (f(r["wall"] for r in runs[key]) / median[ref]["wall"] for f in (min, max))
        same_as = runs["hf", "new" if key[1].endswith("new") else "-"][0]["ids"]
        same = all(r["ids"] == same_as for r in runs[key])
        print(f"{name:40} {wall:7.3f} {wall / median[ref]['wall']:6.2f} {low:5.2f}-{high:<5.2f} "
              f"{cpu:7.3f} {cpu / median[ref]['cpu']:6.2f}  {same!s:8}  {LOADERS[ref].strip()}")  # fmt: skip
    print(f"({repeat} fresh processes per row, round robin; medians; spread: each run's wall "
          f"over the reference's median; load average {os.getloadavg()[0]:.2f})")  # fmt: skip


# ---- parent ---------------------------------------------------------------------------


def run_child(args: list[str], env: dict | None = None) -> dict:
    """Run this script as a child job, unobserved (sampling its memory would slow it)."""
    out = subprocess.run([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE,
                         text=True, check=True, env=env).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def measure(args: list[str]) -> dict:
    """Run this script as a child job; peak summed RSS and PSS of its process tree."""
    command = [sys.executable, __file__, "--child", *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    root = psutil.Process(proc.pid)
    peak_rss = peak_pss = 0
    while proc.poll() is None:
        rss = pss = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                info = p.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss, pss = rss + info.rss, pss + info.pss
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(0.02)
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"child {args} failed with code {proc.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(rss=peak_rss / 2**20, pss=peak_pss / 2**20)
    return result


def repeated(args: list[str], repeat: int) -> dict:
    runs = [measure(args) for _ in range(repeat)]
    return {k: statistics.median(r[k] for r in runs) for k in ("wall", "rss", "pss")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--repeat", type=int, default=1, help="runs per trainer (median)")
    parser.add_argument("--load", action="store_true", help="only the loading benchmark")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        job, rest = args.child[0], args.child[1:]
        jobs = {
            "hf": lambda: child_hf_train(int(rest[0]), None),
            "packlm": lambda: child_packlm_train(
                int(rest[0]), rest[1] or None, int(rest[2]) if rest[2] else None
            ),  # fmt: skip
            "small": lambda: child_small(int(rest[0])),
            "idle": lambda: {"wall": 0.0, "imported": bool(__import__("packlm.tokenizer"))},
            "encode": lambda: child_encode(rest[0], int(rest[1])),
            "load": lambda: child_load(*rest),
        }
        print(json.dumps(jobs[job]()))
        return
    if args.load:
        load_table(max(args.repeat, 3))
        return

    v, cores = str(args.vocab_size), len(os.sched_getaffinity(0))
    print(f"corpus: stdlib .py files; vocab {v}; special {SPECIAL}; {cores} cores; "
          f"load average {os.getloadavg()[0]:.2f}\n")  # fmt: skip
    idle = measure(["idle"])
    with tempfile.TemporaryDirectory() as saved:
        hf = repeated(["hf", v], args.repeat)
        ours = repeated(["packlm", v, saved, ""], args.repeat)
        one = repeated(["packlm", v, "", "1"], args.repeat)
        measure(["packlm", v, saved, ""])  # the tokenizer the encode job loads
        small = measure(["small", "5"]) if GOLDEN.is_file() else None
        enc = measure(["encode", saved, "2"])

    rows = [("tokenizers BpeTrainer (threads)", hf), ("packlm train_bpe_from_iterator", ours),
            ("packlm, num_workers=1", one)]  # fmt: skip
    print(f"{'training, vocab ' + v:40} {'wall s':>7} {'x HF':>6} {'RSS MB':>7} {'x HF':>6} "
          f"{'PSS MB':>7} {'x HF':>6}")  # fmt: skip
    for name, r in rows:
        print(f"{name:40} {r['wall']:7.2f} {r['wall'] / hf['wall']:6.2f} {r['rss']:7.0f} "
              f"{r['rss'] / hf['rss']:6.2f} {r['pss']:7.0f} "
              f"{r['pss'] / hf['pss']:6.2f}")  # fmt: skip
    print(f"{'(idle interpreter + packlm import)':40} {'':7} {'':6} {idle['rss']:7.0f} {'':6} "
          f"{idle['pss']:7.0f}")  # fmt: skip
    if small:
        print(f"\ncorpus.en, vocab 500: {small['wall']:.3f} s (best of 5, in process)")
    print(f"\n{'encoding ' + format(enc['megabytes'], '.1f') + ' MB, by document':40} "
          f"{'wall s':>7} {'MB/s':>7}  same ids")  # fmt: skip
    for row in enc["rows"]:
        print(f"{row['name']:40} {row['wall']:7.2f} {row['mb_s']:7.1f}  {row['same_ids']}")
    print()
    load_table(3)


if __name__ == "__main__":
    main()
