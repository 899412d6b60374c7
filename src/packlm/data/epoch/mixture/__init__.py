"""A mixture by share (`share:` on data.sources, `data.mixture_schedule`): global batches
whose rows come from per-source streams in the schedule's shares.

1. `allocation.py`: `Allocation`: the rows of each source in each global batch, a closed-form
   pure function of (schedule, global batch) with its guarantee against the target shares.
2. `streams.py`: `source_plan` (pass p of a source: the ordinary plan of its documents
   alone) and `SourceStreams` (passes end to end; a global batch's rows as document pieces).
3. `sampler.py`: `MixtureSampler`: `PlanSampler`'s position, ranks, skips and resume over
   the streams (imports torch; the others do not, so `python -m packlm.stats` stays light).
4. `expected.py`: expected supervised tokens per source and phase, and a token budget's
   horizon.
"""
