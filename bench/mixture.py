"""A mixture by share against the plain plan: the sampler's cost per global batch, and how
long a resume deep into a run takes to place its first batch.

    python bench/mixture.py                # 10^6 documents in 3 sources, 400 global batches
    python bench/mixture.py --docs 100000

Synthetic document lengths (uniform in [1, 2·mean)), no token file: only the main process's
sampler is timed (the document pieces of each global batch, what workers are sent), in this
process's CPU time. Reference: `PlanSampler` over the plan of all sources at their natural
size, the same batches, in the same run. The resume: global batch 20,000 of the same
schedule where the third source ("math", 50% from batch 200) is two documents (300 and 500
tokens: one sample a pass): without the resume point a checkpoint keeps, every pass before it
is counted first (~0.07 ms each), against placing global batch 0; with it, only the passes from
there on; and a trace of an early and a late batch from that point (counted on from pass 0,
or back from the point, whichever is fewer passes). Last, the cost of a schedule point far
away: a linear point at step 3e9 against one at step 200 (before: 22 GiB asked of numpy).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from packlm.config.data import DataConfig
from packlm.data.epoch.mixture.allocation import Allocation
from packlm.data.epoch.mixture.sampler import MixtureSampler
from packlm.data.epoch.mixture.streams import SourceStreams, source_config, source_plan
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import PlanSampler

NAMES = ["web", "code", "math"]


def streams(lengths, sources, cfg, rows):
    docs = [np.flatnonzero(sources == s) for s in range(len(NAMES))]
    mine = [source_config(cfg, s) for s in range(len(docs))]
    plan_of = lambda s, p: source_plan(lengths, mine[s], p, docs[s])  # noqa: E731
    return SourceStreams(plan_of, NAMES, Allocation.of(cfg, rows), cfg.seed)


def cpu(run) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=400)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2 * 600, size=args.docs).astype(np.int64)
    sources = np.repeat([0, 1, 2], [args.docs * 7 // 10, args.docs * 2 // 10, 0])
    sources = np.concatenate([sources, np.full(args.docs - len(sources), 2)]).astype(np.int32)
    schedule = [
        {"step": 0, "shares": {"web": 0.7, "code": 0.2, "math": 0.1}},
        {"step": args.batches // 2, "shares": {"web": 0.3, "code": 0.2, "math": 0.5}},
    ]
    cfg = DataConfig(sources=NAMES, mixture_schedule=schedule, window=1024, stride=1024,
                     batch_size=32).validate()  # fmt: skip
    plain = DataConfig(window=1024, stride=1024, batch_size=32).validate()
    plan = build_plan(lengths, plain, 0)
    mixture = MixtureSampler(streams(lengths, sources, cfg, 32), 32)
    mixture.streams.epoch_batches()  # the passes 0, as the plain plan is built, not timed
    n = args.batches

    def deal(sampler):
        return lambda: [b for _, b in zip(range(n), iter(sampler), strict=False)]

    t_plain = cpu(deal(PlanSampler(lambda e: plan, 32)))
    t_mix = cpu(deal(mixture))
    print(f"{n} global batches of 32 x 1025 rows: plain plan {t_plain * 1e3 / n:.2f} ms/batch, "
          f"mixture {t_mix * 1e3 / n:.2f} ms/batch: {t_mix / t_plain:.2f}x")  # fmt: skip

    head = min(args.docs, 200_000)  # web and code: 3 : 1 of the first documents, math: two
    small = np.concatenate([lengths[:head], [300, 500]]).astype(np.int64)
    tiny = np.concatenate([np.repeat([0, 1], [head * 3 // 4, head - head * 3 // 4]), [2, 2]])
    tiny = tiny.astype(np.int32)
    deep = streams(small, tiny, cfg, 32)
    first = cpu(lambda: deep.pieces(0, np.arange(32)))
    later = cpu(lambda: deep.pieces(20_000, np.arange(32)))
    print(f"resume at global batch 20,000 ({deep._first[2] + len(deep._counts[2]):,} passes of a 2-document "
          f"source counted): {later:.2f} s CPU; batch 0: {first:.3f} s: {later / first:.0f}x")  # fmt: skip
    point = deep.resume_point(20_000)  # what the checkpoint keeps (PlanDataLoader.state_dict)
    resumed = streams(small, tiny, cfg, 32)
    resumed.resume_from(point)
    kept = cpu(lambda: resumed.pieces(20_000, np.arange(32)))
    same = np.array_equal(resumed.pieces(20_000, np.arange(32)), deep.pieces(20_000, np.arange(32)))
    print(f"the same resume from the checkpoint's resume point {point['math']}: {kept:.3f} s CPU "
          f"({kept / first:.1f}x batch 0; the same rows: {same})")  # fmt: skip
    for batch in (300, 19_990):  # a trace from the checkpoint: an early step, a late one
        traced = streams(small, tiny, cfg, 32)
        traced.resume_from(point)
        took = cpu(lambda b=batch, t=traced: t.pieces(b, np.arange(32)))
        same = np.array_equal(
            traced.pieces(batch, np.arange(32)), deep.pieces(batch, np.arange(32))
        )
        print(f"a trace of global batch {batch:,} from that point: {took:.3f} s "
              f"CPU (the same rows: {same})")  # fmt: skip

    far_point(schedule, n)


def far_point(schedule, n: int) -> None:
    """A linear schedule whose second point is at step 3e9 against one at step n/2: the
    allocation of the first n global batches, in CPU time and peak memory (tracemalloc)."""
    import tracemalloc

    def cost(step: int) -> tuple[float, float]:
        points = [schedule[0], {**schedule[1], "step": step}]
        cfg = DataConfig(sources=NAMES, mixture_schedule=points, mixture_interpolation="linear",
                         batch_size=32).validate()  # fmt: skip
        tracemalloc.start()
        took = cpu(lambda: Allocation.of(cfg, 32).rows_of(np.arange(n)))
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        return took, peak

    (t_near, m_near), (t_far, m_far) = cost(n // 2), cost(3_000_000_000)
    print(f"rows of the first {n} global batches, linear point at step {n // 2}: {t_near * 1e3:.1f} "
          f"ms CPU, {m_near:.1f} MiB peak; at step 3e9: {t_far * 1e3:.1f} ms, {m_far:.1f} MiB "
          f"({t_far / t_near:.1f}x, {m_far / m_near:.1f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
