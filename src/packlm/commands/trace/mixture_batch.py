"""The trace of one global batch of a mixture by share (`packlm.data.epoch.mixture`): each
row names its source, the pass of the source's stream and the row of that stream it is."""

from __future__ import annotations

from typing import Any

import numpy as np

from packlm.errors import ConfigError


def mixture_batch(tracer: Any, epoch: int, batch: int, rank: int | None) -> dict[str, Any]:
    """`Tracer.batch` under a mixture: global batch G = epoch * (batches an epoch) + batch."""
    streams, world = tracer.streams, tracer.schedule.world_size
    n_batches = tracer.epoch_batches(epoch)
    if not 0 <= batch < n_batches:
        raise ConfigError(f"batch={batch}: epoch {epoch} has {n_batches} global batches")
    g = epoch * streams.epoch_batches() + batch
    slots = np.arange(tracer.step_size)
    if rank is not None:
        if not 0 <= rank < world:
            raise ConfigError(f"rank={rank}: outside the run's {world} rank(s)")
        slots = slots[slots % world == rank]
    source, row = streams.batch_sources(g)
    rows: list[dict[str, Any]] = []
    for s in np.unique(source[slots]).tolist():
        mine = slots[source[slots] == s]
        passes, positions = streams.locate(s, row[mine])
        for p in np.unique(passes).tolist():
            at = passes == p
            traced = tracer._rows(streams.plan(s, p), positions[at], mine[at])
            for r, k in zip(traced, row[mine][at].tolist(), strict=True):
                r["mixture"] = {"source": streams.names[s], "pass": p, "stream_row": k}
            rows += traced
    rows.sort(key=lambda r: r["slot"])
    step = tracer.global_step_of(epoch, batch)
    shares = streams.allocation.parts(np.asarray([g]))[0] / (1 << 20)
    d = tracer.plans.data
    return {
        "epoch": epoch,
        "batch": batch,
        "global_batch": g,
        "step": step,
        "plan_step": tracer.plan_step_of(epoch, batch),  # what data.skip_steps names
        "skipped_step": step is None,
        "phase": None,
        "window": d.window,
        "stride": d.stride,
        "tail": d.tail,
        "packing": d.packing,
        "world_size": world,
        "batch_size": d.batch_size,
        "mixture_shares": dict(zip(streams.names, shares.round(6).tolist(), strict=True)),
        "mixture_rows": dict(
            zip(
                streams.names,
                np.bincount(source, minlength=len(streams.names)).tolist(),
                strict=True,
            )
        ),
        "first_sample_position": batch * tracer.step_size,
        "epoch_samples": n_batches * tracer.step_size,
        "rows": rows,
    }
