"""Shared helpers of the plan/dataset/collate/stats tests: slow but obvious reference
implementations written straight from DESIGN.md, and synthetic stores whose token ids are
their own store positions (so a batch's labels say exactly which tokens were targets)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from packlm.config.data import DataConfig
from packlm.data.epoch.collate import collate
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset, plan_signature
from packlm.data.epoch.plan import EpochPlan, build_plan
from packlm.data.epoch.sampler import PlanSampler
from packlm.data.store.token_store import write_store

PAD = -7  # never a store position, so never confused with a real token


def config(**overrides) -> DataConfig:
    """A small deterministic config: no offsets, no shuffling, unless overridden."""
    values = dict(
        window=4,
        stride=4,
        random_offset=False,
        tail="pad",
        packing="document",
        shuffle=False,
        shuffle_documents=False,
        batch_size=3,
    )
    if "curriculum" in overrides:  # the curriculum's last phase sets window and stride
        del values["window"], values["stride"]
    values.update(overrides)
    return DataConfig(**values).validate()


def position_store(lengths) -> SimpleNamespace:
    """An in-memory stand-in for a TokenStore whose token at position p is p."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1], dtype=np.int64)
    sources = np.zeros(len(lengths), dtype=np.int32)
    return SimpleNamespace(tokens=tokens, doc_offsets=offsets, doc_sources=sources)


def position_dataset(lengths, window: int) -> WindowDataset:
    ds = WindowDataset("unused", window, PAD)
    ds._store = position_store(lengths)
    return ds


def write_position_store(path: Path, lengths, sources=None, names=None):
    """A real store on disk with token id = store position (no EOS: the plan never looks)."""
    starts = np.concatenate([[0], np.cumsum(lengths)])
    docs = [np.arange(starts[i], starts[i + 1]) for i in range(len(lengths))]
    vocab = int(starts[-1]) + 2
    return write_store(
        path,
        docs,
        vocab,
        eos_id=vocab - 2,
        pad_id=vocab - 1,
        doc_sources=sources,
        source_names=names,
    )


def all_batches(plan: EpochPlan, dataset: WindowDataset, batch_size: int, rank=0, world=1):
    sampler = PlanSampler(lambda e: plan, batch_size, rank, world, epoch=plan.epoch)
    return [collate(dataset[b], plan.packing) for b in sampler]


def loader_over(store, cfg: DataConfig, sampler: PlanSampler, workers=0, weights=None):
    """A PlanDataLoader reading `store` in the batches of `sampler` (workers not persistent)."""
    return PlanDataLoader(
        WindowDataset(store.path, cfg.window, store.pad_id),
        sampler,
        cfg.packing,
        plan_signature(cfg, store, weights),
        num_workers=workers,
        persistent_workers=False,
    )


def plan_of(lengths, cfg: DataConfig, epoch: int = 0, **kw) -> EpochPlan:
    return build_plan(np.asarray(lengths, dtype=np.int64), cfg, epoch, **kw)


def reference_packs(lengths_in_order, pack_size) -> list[list[int]]:
    """Ordered greedy packing, one document at a time."""
    packs, current, used = [], [], 0
    for j, n in enumerate(lengths_in_order):
        if current and used + n > pack_size:
            packs.append(current)
            current, used = [], 0
        current.append(j)
        used += n
    if current:
        packs.append(current)
    return packs


def reference_windows(
    seq_lengths, offsets, window: int, stride: int, tail: str
) -> list[tuple[int, int]]:
    """(stream start, tokens read) of every sample, sequence after sequence."""
    out, base, t1 = [], 0, window + 1
    for length, offset in zip(seq_lengths, offsets, strict=True):
        if 0 < length < t1:
            out.append((base, length))
        elif length >= t1:
            start = offset
            while start + t1 <= length:
                out.append((base + start, t1))
                start += stride
            last_end = start - stride + t1
            if tail != "drop" and last_end < length and start < length:
                out.append(
                    (base + length - t1, t1) if tail == "cover" else (base + start, length - start)
                )
        base += length
    return out


def target_counts(batches, n_tokens: int) -> np.ndarray:
    """How many times each store position is a label in the batches."""
    labels = np.concatenate(
        [np.zeros(0, np.int64)] + [b["labels"].numpy().ravel() for b in batches]
    )
    return np.bincount(labels[labels >= 0], minlength=n_tokens)
