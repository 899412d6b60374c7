"""Epoch time: token store -> epoch plan (order -> packing -> windows) -> samples -> batches.

1. `plan.py`: `build_plan(document lengths, data config, epoch)` -> `EpochPlan`: document
   order (mixing weights, shuffle), packs, offsets, windows, sample order; a pure function
   of (store, config, seed, epoch), a few bytes per document and sequence plus one
   permutation of the samples.
   `order.py`: step 1, the document order: mixing weights, `data.group_by`, shuffling.
2. `packing/`: epoch documents -> sequences (`pack_size`: ordered greedy or best-fit packs,
   documents never cut; unlimited: the whole stream is one sequence).
3. `windows.py`: sequences -> window starts: offset draw, grid, full windows, tail policies,
   validation windows. Counting and placement come from one function. `snap.py`: a window
   start moved forward to a document or paragraph start (`data.snap`).
4. `sampler.py`: plan -> this rank's batches as document pieces (rank sharding, resume point).
   `curriculum.py`: data.curriculum, which phase's plan (window, stride) each global batch
   reads: the switch at the first batch after `until` supervised targets, mid-epoch too,
   counted ahead from the plan's pieces so the epoch's length and a resume stay exact.
   `mixture/`: a mixture by share: each global batch's rows from per-source streams of
   passes (each pass a plan of one source), in the schedule's shares.
5. `loader.py`: pieces -> tokens and segments read from the store memmap (in workers);
   `PlanDataLoader` keeps the data position in checkpoints, guarded by the plan signature.
6. `collate.py`: tokens + segments -> the batch of DESIGN.md (input_ids, labels,
   segment_ids, position_ids).
7. `statistics/`: a plan -> what it does to the data (fill, target multiplicity, overlap,
   window starts on boundaries, attention work, per source), without reading a token.

`indexing.py` holds the index dtype and interval lookup the plan's arrays share.
"""

from importlib import import_module

from packlm.data.epoch.plan import EpochPlan, build_plan
from packlm.data.epoch.statistics import plan_statistics, to_json
from packlm.data.epoch.windows import SequenceWindows, sequence_windows, validation_config

# Steps 4-6 build torch tensors and DataLoaders; they are imported on first use, so planning
# alone (python -m packlm.stats) never imports torch.
_TORCH_STEPS = {
    "IGNORE_INDEX": "collate", "Samples": "collate", "collate": "collate",
    "PlanDataLoader": "loader", "WindowDataset": "loader", "plan_signature": "loader",
    "BatchPieces": "sampler", "PlanSampler": "sampler",
}  # fmt: skip


def __getattr__(name: str):
    if name in _TORCH_STEPS:
        return getattr(import_module(f"packlm.data.epoch.{_TORCH_STEPS[name]}"), name)
    raise AttributeError(f"module 'packlm.data.epoch' has no attribute {name!r}")


__all__ = [
    "IGNORE_INDEX",
    "BatchPieces",
    "EpochPlan",
    "PlanDataLoader",
    "PlanSampler",
    "Samples",
    "SequenceWindows",
    "WindowDataset",
    "build_plan",
    "collate",
    "plan_signature",
    "plan_statistics",
    "sequence_windows",
    "to_json",
    "validation_config",
]
