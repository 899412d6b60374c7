"""The cost of `evaluate per_document=true` against the validation-window pass, and how far
the two meanings of a document's loss lie apart (docs/trace.md, "Two meanings").

    python bench/per_document.py CKPT                           # the run's validation split
    python bench/per_document.py CKPT --val-sources a.txt --separator '\\n\\n' --repeat 3

Both passes score the same documents with the same model in this process, alternating, and
the times are the scoring loops only (the store and the model are opened once): the
validation windows (stride = window, the run's packing: what val/loss and training's
hardest-documents table score) and every document on its own context (whole documents
packed best-fit, rolling windows `--stride` apart, default half the window). Then, per
document, its loss both ways.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from packlm.commands.evaluate import open_scoring, score
from packlm.model.source_loss import GroupTotals


def timed_pass(run, stride):
    """(seconds, rows, float64 [3, documents] totals) of one scoring pass."""
    run = run._replace(stride=stride)
    totals = GroupTotals(run.store.n_docs)
    start = time.perf_counter()
    with torch.no_grad():
        _, _, _, rows = score(run.model, run.loader(), run.byte_lengths, totals, "cpu", False)
    return time.perf_counter() - start, rows, totals.take().numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ckpt")
    parser.add_argument("--val-sources", nargs="*", help="files to score (default: the run's)")
    parser.add_argument("--separator", help="split the files into documents at this text")
    parser.add_argument("--window", type=int, help="data.window (default: the checkpoint's)")
    parser.add_argument("--stride", type=int, help="per_document_stride (default: window/2)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache-dir", default=".cache/packlm")
    args = parser.parse_args()
    keys = {"val_sources": args.val_sources, "window": args.window, "batch_size": args.batch_size}
    if args.separator is not None:
        keys["separator"] = args.separator.encode().decode("unicode_escape")
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    run = open_scoring(args.ckpt, keys, args.cache_dir, "cpu", True, args.stride)
    print(run.scored.says)
    print(f"window {run.data.window}, packing {run.data.packing}, per_document_stride {run.stride}")
    timed_pass(run, None)  # warm-up: allocator, first reads of the store
    times: dict[str, list[float]] = {"windows": [], "documents": []}
    for _ in range(args.repeat):
        for name, stride in (("windows", None), ("documents", run.stride)):
            seconds, rows, totals = timed_pass(run, stride)
            times[name].append(seconds)
            if name == "windows":
                win_rows, win = rows, totals
            else:
                doc_rows, doc = rows, totals
    lengths = np.diff(np.asarray(run.store.doc_offsets)) + int(run.data.bos)
    t1 = run.data.window + 1
    print(
        f"{run.store.n_docs:,} documents, {int(lengths.sum()):,} tokens; "
        f"{int((lengths <= t1).sum()):,} fit the window (T+1 = {t1} tokens), "
        f"{int((lengths > t1).sum()):,} longer ({int(lengths[lengths > t1].sum()):,} tokens)"
    )
    median = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}  # on a shared machine: the least disturbed
    print(f"validation windows: {win_rows:,} rows, {median['windows']:.2f} s (median of "
          f"{args.repeat}: {', '.join(f'{t:.2f}' for t in times['windows'])})")  # fmt: skip
    print(f"per document:       {doc_rows:,} rows, {median['documents']:.2f} s (median of "
          f"{args.repeat}: {', '.join(f'{t:.2f}' for t in times['documents'])})")  # fmt: skip
    print(f"cost: {median['documents'] / median['windows']:.2f}x the validation pass's time "
          f"(medians; fastest of each: {best['documents'] / best['windows']:.2f}x), "
          f"{doc_rows / win_rows:.2f}x its rows")  # fmt: skip
    assert (win[1] == doc[1]).all()  # the same targets, each once, both ways
    with np.errstate(divide="ignore", invalid="ignore"):
        lw, ld = win[0] / win[1], doc[0] / doc[1]  # [documents] loss per target
    has = win[1] > 0
    diff = np.abs(lw - ld)[has]
    print(
        f"loss (nats/token): windows {win[0].sum() / win[1].sum():.4f}, per document "
        f"{doc[0].sum() / doc[1].sum():.4f}; bpb {win[0].sum() / np.log(2) / win[2].sum():.4f} "
        f"vs {doc[0].sum() / np.log(2) / doc[2].sum():.4f}"
    )
    short = (lengths <= t1)[has]
    for name, sel in (("that fit the window", short), ("longer than the window", ~short)):
        if sel.any():
            d = diff[sel]
            print(
                f"documents {name}: {int((d > 1e-4).sum())} of {int(sel.sum())} differ "
                f"by > 1e-4 nats/token between the two (max {d.max():.2e}, mean {d.mean():.2e})"
            )
    rank_w, rank_d = (
        np.argsort(-np.where(has, lw, -np.inf)),
        np.argsort(-np.where(has, ld, -np.inf)),
    )
    top = min(10, int(has.sum()))
    common = len(set(rank_w[:top].tolist()) & set(rank_d[:top].tolist()))
    print(f"hardest {top}: {common} documents in common between the two rankings")


if __name__ == "__main__":
    main()
