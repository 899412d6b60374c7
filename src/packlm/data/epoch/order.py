"""The epoch's document order: mixing weights, grouping, shuffling (step 1 of the plan).

Mixing rule: a source with weight w contributes every one of its n documents floor(w) times,
plus round(frac(w) * n) of them once more, drawn without replacement afresh each epoch. The
weight is thus the expected number of times each document is seen per epoch (1 = natural).
With `data.group_by` a group's documents stay adjacent (in store order) and the groups are
shuffled among themselves instead of the documents.
"""

from __future__ import annotations

import numpy as np

from packlm.config.data import DataConfig
from packlm.data.epoch.indexing import index_dtype
from packlm.errors import ConfigError

DOCS, MIX, OFFSETS, SAMPLES, GROUPS = range(5)
"""The independent random streams of one epoch (a new purpose never changes the others)."""


def plan_rng(seed: int, epoch: int, purpose: int) -> np.random.Generator:
    """The generator of one purpose in one epoch: independent of every other (seed, epoch, purpose)."""
    return np.random.default_rng([seed % 2**64, epoch, purpose])


def epoch_documents(
    n_docs: int,
    cfg: DataConfig,
    epoch: int,
    doc_sources: np.ndarray | None = None,
    weights: list[float] | None = None,
    doc_groups: np.ndarray | None = None,
) -> np.ndarray:
    """Store document of each epoch document: mixed by source weight, then shuffled if asked;
    with `doc_groups`, grouped: a group's documents adjacent in store order, groups shuffled."""
    dtype = index_dtype(n_docs)
    if weights is None or all(w == 1.0 for w in weights):
        order = np.arange(n_docs, dtype=dtype)
    else:
        if doc_sources is None:
            raise ValueError("mixing weights need the store's doc_sources")
        sources = np.asarray(doc_sources)
        n_sources = max(len(weights), int(sources.max()) + 1 if n_docs else 0)
        check_mixing_size(sources, weights)
        rng = plan_rng(cfg.seed, epoch, MIX)
        parts = []
        for s in range(n_sources):
            docs = np.flatnonzero(sources == s).astype(dtype)
            whole, frac = divmod(float(weights[s]) if s < len(weights) else 1.0, 1.0)
            parts += [docs] * int(whole)
            extra = round(frac * len(docs))
            if extra:
                parts.append(rng.choice(docs, extra, replace=False))
        # store order, copies adjacent
        order = np.sort(np.concatenate([np.zeros(0, dtype), *parts]))
    if doc_groups is not None:
        return group_documents(order, np.asarray(doc_groups), cfg, epoch)
    if cfg.shuffle_documents:
        plan_rng(cfg.seed, epoch, DOCS).shuffle(order)
    return order


def group_documents(order: np.ndarray, doc_groups: np.ndarray, cfg: DataConfig, epoch: int):
    """`order` (store order, copies adjacent) with each group's documents contiguous and the
    groups in a fresh random order every epoch (`data.shuffle_documents`)."""
    n_groups = int(doc_groups.max()) + 1 if len(doc_groups) else 0
    rank = np.arange(n_groups)
    if cfg.shuffle_documents:
        rank = plan_rng(cfg.seed, epoch, GROUPS).permutation(n_groups)  # position of each group
    return order[np.argsort(rank[doc_groups[order]], kind="stable")]


def directory_groups(doc_ids: list[str]) -> np.ndarray:
    """int32 [n_docs]: one group per (source, directory) of the documents' ids
    ("<source>:<dir>/<file>[:<record>]")."""
    keys = []
    for doc_id in doc_ids:
        source, _, rest = doc_id.partition(":")
        keys.append(f"{source}:{rest.split(':', 1)[0].rpartition('/')[0]}")
    return np.unique(np.asarray(keys), return_inverse=True)[1].astype(np.int32)


MAX_EPOCH_DOCUMENTS = 1 << 28
"""Document copies one epoch may hold (1 GiB of int32 order): weights beyond it are refused."""


def check_mixing_size(doc_sources: np.ndarray, weights: list[float]) -> None:
    """Refuse, naming the key, mixing weights whose epoch would not fit in memory."""
    per_source = np.bincount(doc_sources, minlength=len(weights))
    copies = per_source[: len(weights)] * np.asarray(weights, dtype=np.float64)
    total = float(copies.sum()) + float(per_source[len(weights) :].sum())
    if total > MAX_EPOCH_DOCUMENTS:
        s = int(np.argmax(copies))
        raise ConfigError(
            f"data.sources[{s}].weight={weights[s]}: an epoch would hold {total:,.0f} document "
            f"copies ({total * 4 / 2**30:.1f} GiB for the document order alone; at most "
            f"{MAX_EPOCH_DOCUMENTS:,}); lower the weight or train more epochs"
        )
