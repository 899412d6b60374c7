"""Document pieces -> batches: the worker-side read from the store, and the resumable loader.

`WindowDataset` turns one batch's pieces into token and segment arrays (in a worker);
`PlanDataLoader` collates them and keeps the data position in Lightning's checkpoints,
guarded by the plan signature: the data keys, mixing weights and store identity that
decide the plans, so a resume with other data settings is refused instead of drifting.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Dataset

from packlm.cache.fingerprint import store_identity
from packlm.config.data import DataConfig
from packlm.config.mixture import MIXTURE_KEY, mixture_signature
from packlm.data.epoch.collate import Samples, collate_arrays, to_tensors
from packlm.data.epoch.curriculum import Position
from packlm.data.epoch.mixture.sampler import MixtureSampler
from packlm.data.epoch.sampler import BatchPieces, PlanSampler
from packlm.data.store.token_store import TokenStore
from packlm.data.store.union import open_store
from packlm.errors import ConfigError
from packlm.runtime.workers import leave_ctrl_c_to_the_parent, start_context
from packlm.tokenizer.chat import supervised_table

log = logging.getLogger(__name__)

PLAN_KEYS = (
    "window",
    "stride",
    "random_offset",
    "tail",
    "snap",
    "snap_tolerance",
    "bos",
    "packing",
    "pack_size",
    "pack_strategy",
    "pack_buffer",
    "shuffle",
    "shuffle_documents",
    "group_by",
    "curriculum",
    "seed",
)
"""The data keys that decide the epoch plans. Not data.batch_size, the rank count or the
workers: the position is global samples, so a resume may change those (`resume_position`)."""


class WindowDataset(Dataset):
    """BatchPieces -> Samples, read from the store's memmap (only the tokens the pieces name).

    With `bos_id` (data.bos) every document is read as [BOS, its tokens..., EOS]: the plan's
    document lengths count the BOS, position 0 of a document is BOS and position p >= 1 is
    the store's token p-1, so no store holds the BOS and its first real token is a target.
    With `documents` the batch also names each token's store document (`document_ids`, for
    validation's per-document losses). A store with conversations (`TokenStore.roles`) gives
    each token's supervision (`Samples.supervised`) from its role code and
    `chat_supervised` (data.chat_supervised); a BOS is never a target.
    """

    def __init__(
        self, store_path: str | Path | tuple[Path, ...], window: int, pad_id: int,
        bos_id: int | None = None, documents: bool = False, chat_supervised: str = "assistant",
    ):  # fmt: skip
        """`store_path`: a store directory, or the shards' (`TokenStore.path` of either)."""
        self.store_path = store_path if isinstance(store_path, tuple) else Path(store_path)
        self.window = window
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.documents = documents
        self.supervised_roles = supervised_table(chat_supervised)  # bool [256] by role code
        self._store: TokenStore | None = None
        self._source_dtype: np.dtype | None = None

    @property
    def store(self) -> TokenStore:
        if self._store is None:  # opened lazily, once per process
            self._store = open_store(self.store_path)
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}  # memmaps are reopened, never pickled

    @property
    def source_dtype(self) -> np.dtype:
        """int16 for the batch's `source_ids`, int32 past 32767 sources (found once)."""
        if self._source_dtype is None:
            sources = self.store.doc_sources
            top = int(np.max(sources)) if len(sources) else 0
            self._source_dtype = np.dtype(np.int16 if top < 2**15 else np.int32)
        return self._source_dtype

    def __getitem__(self, batch: BatchPieces) -> Samples:
        row, doc, start, length = batch.pieces  # [p] each, rows in order
        t1 = (batch.window or self.window) + 1  # a curriculum phase's window, or the split's
        tokens = np.full((batch.rows, t1), self.pad_id, dtype=np.int64)
        segments = np.full((batch.rows, t1), -1, dtype=np.int32)
        sources = np.full((batch.rows, t1), -1, dtype=self.source_dtype)
        skipped = None if batch.skipped is None else np.zeros((batch.rows, t1), dtype=bool)
        documents = None
        roles = getattr(self.store, "roles", None)  # a duck-typed store may have none
        supervised = None if roles is None else np.zeros((batch.rows, t1), dtype=bool)
        if self.documents:
            dtype = np.int32 if self.store.n_docs < 2**31 else np.int64
            documents = np.full((batch.rows, t1), -1, dtype=dtype)
        p = len(row)
        if p:
            first = np.ones(p, dtype=bool)
            first[1:] = row[1:] != row[:-1]
            # [p]: index of the first piece of each piece's row
            run = np.maximum.accumulate(np.where(first, np.arange(p), 0))
            segment = np.arange(p) - run
            ends = np.cumsum(length)
            column = ends - length - (ends - length)[run]  # [p] where each piece starts in its row
            piece = np.repeat(np.arange(p), length)  # [n] piece of each token
            within = np.arange(len(piece)) - (ends - length)[piece]
            position = start[piece] + within  # [n] position inside its document
            if self.bos_id is None:
                source = self.store.doc_offsets[doc][piece] + position
                read = self.store.tokens[source]
            else:  # position 0 is the BOS, p >= 1 the store's token p - 1
                source = self.store.doc_offsets[doc][piece] + np.maximum(position - 1, 0)
                read = np.where(position == 0, self.bos_id, self.store.tokens[source])
            tokens[row[piece], column[piece] + within] = read
            if supervised is not None:  # [n]: may each token read be a target
                ok = self.supervised_roles[roles[source]]
                if self.bos_id is not None:
                    ok &= position > 0
                supervised[row[piece], column[piece] + within] = ok
            segments[row[piece], column[piece] + within] = segment[piece]
            sources[row[piece], column[piece] + within] = self.store.doc_sources[doc][piece]
            if skipped is not None:  # data.skip_documents: their labels are dropped in collate
                skipped[row[piece], column[piece] + within] = batch.skipped[piece]
            if documents is not None:
                documents[row[piece], column[piece] + within] = doc[piece]
        return Samples(tokens, segments, sources, skipped, documents, supervised)


class PlanDataLoader(DataLoader):
    """A DataLoader over a PlanSampler; Lightning saves its `state_dict` in checkpoints.

    The state counts the batches this loader handed out (not what workers prefetched), so a
    restored loader continues with exactly the batch that an uninterrupted run would give.
    Workers send numpy arrays (fast to pickle); they become tensors here, without a copy.
    They start by packlm's own `start_context`, never the process-wide default start method:
    a host process may own that one (joblib's loky workers set it to "loky", whose Popen only
    starts loky's own Process class, so torch's workers failed with "no attribute 'env'").
    """

    def __init__(
        self,
        dataset: WindowDataset,
        sampler: PlanSampler,
        packing: str,
        signature: dict[str, Any],
        num_workers: int = 0,
        varlen: bool = False,
        mixture_may_change: bool = False,
        **kwargs: Any,
    ):
        if not isinstance(sampler, PlanSampler):  # Lightning's distributed sampler replacement
            raise ConfigError(
                f"PackedDataModule shards the epoch plan itself, but its loader was rebuilt "
                f"around a {type(sampler).__name__}: create the Trainer with "
                "use_distributed_sampler=False"
            )
        kwargs.setdefault("persistent_workers", num_workers > 0)
        kwargs.setdefault("worker_init_fn", leave_ctrl_c_to_the_parent)
        if num_workers > 0:
            kwargs.setdefault("multiprocessing_context", start_context())
        super().__init__(
            dataset,
            sampler=sampler,
            batch_size=None,
            collate_fn=partial(collate_arrays, packing=packing, varlen=varlen),
            num_workers=num_workers,
            **kwargs,
        )
        self.signature = signature
        self.varlen = varlen  # Lightning rebuilds loaders from their attributes
        self.mixture_may_change = mixture_may_change  # data.mixture_change_on_resume

    def __iter__(self):
        sampler: PlanSampler = self.sampler
        sampler.begin_pass()  # runs at the first next(), after Lightning's set_epoch
        for batch in super().__iter__():
            phase, tokens = sampler.position.phase, sampler.position.tokens
            sampler.position.set(sampler.pending.popleft())  # this batch is handed out
            if sampler.phases and sampler.position.phase != phase:
                log_switch(sampler, tokens)
            yield to_tensors(batch)

    def state_dict(self) -> dict[str, Any]:
        sampler: PlanSampler = self.sampler
        state = {
            **sampler.position.as_dict(),  # epoch, consumed, curriculum phase, tokens, batch
            "world_size": sampler.world_size,  # how the position was reached, for the log
            "batch_size": sampler.batch_size,
            "num_workers": self.num_workers,
            "plan_signature": self.signature,
        }
        if isinstance(sampler, MixtureSampler):  # where each source's stream is at
            at = sampler.position
            g = sampler.global_batch(at.epoch, at.batch + at.dropped)  # the next one dealt
            state["mixture_passes"] = sampler.streams.resume_point(g)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at the saved global position, with this run's ranks, batch and workers.

        The rest of the epoch's order is dealt to this run's ranks by the sampler's rule from
        `consumed` on. `batch` keeps the saved count: it is what Lightning restores as this
        epoch's finished batches per rank, and `len()` adds the batches that remain, so the
        epoch ends after exactly the rest of its samples whatever the rank count was.
        """
        sampler: PlanSampler = self.sampler
        check_plan_signature(
            state.get("plan_signature", {}), self.signature, self.mixture_may_change
        )
        saved_world = int(state.get("world_size", sampler.world_size))
        saved_batch = int(state.get("batch_size", sampler.batch_size))
        consumed = int(state["consumed"])
        default_batch = -(-consumed // (saved_world * saved_batch))  # a state before curriculum
        check_step_skips(sampler, state, saved_world * saved_batch)
        if isinstance(sampler, MixtureSampler) and "mixture_passes" in state:
            sampler.streams.resume_from(state["mixture_passes"])  # no pass before it counted
        sampler.resume(
            Position(
                int(state["epoch"]),
                int(state.get("phase", 0)),
                consumed,
                int(state.get("tokens", 0)),
                int(state.get("batch", default_batch)),
                int(state.get("steps", 0)),
                int(state.get("dropped", 0)),
            )
        )
        saved = (saved_world, saved_batch, state.get("num_workers", self.num_workers))
        now = (sampler.world_size, sampler.batch_size, self.num_workers)
        if saved != now and sampler.rank == 0 and sampler.epoch == int(state["epoch"]):
            log.info("%s", resume_message(sampler, saved, now))


def check_step_skips(sampler: PlanSampler, state: dict[str, Any], saved_step: int) -> None:
    """data.skip_steps numbers the plan's steps in global batches of the run's size, counted
    from its start: refuse a resume that cannot keep that numbering."""
    if isinstance(sampler, MixtureSampler) and saved_step != sampler.step:
        raise ConfigError(
            f"data.batch_size: the checkpoint's global batch is {saved_step} samples and this "
            f"run's {sampler.step} (ranks x data.batch_size): a mixture's shares are dealt per "
            "global batch; resume with the same global batch (another rank count is fine)"
        )
    if not sampler.skip_steps:
        return
    if saved_step != sampler.step:
        raise ConfigError(
            f"data.skip_steps: the checkpoint's global batch is {saved_step} samples and this "
            f"run's {sampler.step} (ranks x data.batch_size): skipped steps would name other "
            "samples; resume with the same ranks and batch size, or without data.skip_steps"
        )
    if "steps" not in state and int(state["epoch"]) > 0:
        raise ConfigError(
            "data.skip_steps: the checkpoint is older than the step count it needs (written "
            "after epoch 0 without one); resume without data.skip_steps"
        )


def resume_message(sampler: PlanSampler, saved: tuple, now: tuple) -> str:
    """How a resume with other (ranks, per-rank batch, workers) maps the saved position."""
    at, remain = sampler.position, sum(s.batches for s in sampler.segments())

    def setup(world: int, batch: int, workers: Any) -> str:
        extra = f", {workers} worker(s)" if saved[2] != now[2] else ""
        return f"{world} rank(s) x batch {batch}{extra}"

    return (
        f"resume: {setup(*saved)} -> {setup(*now)}: epoch {at.epoch} continues at sample "
        f"{at.consumed:,} of {sampler.plan.n_samples:,} ({at.batch:,} global batches of "
        f"{saved[0] * saved[1]} samples were done; {remain:,} of {sampler.step} remain, "
        f"{sampler.batch_size} per rank)"
    )


def log_switch(sampler: PlanSampler, tokens: int) -> None:
    """The first batch of a curriculum phase was handed out, `tokens` targets after the start."""
    at = sampler.position
    window, stride, _ = sampler.phases[at.phase]
    log.info(
        "data.curriculum: phase %d (window %d, stride %d) from global batch %d of epoch %d, "
        "after %d supervised tokens", at.phase, window, stride, at.batch - 1, at.epoch, tokens,
    )  # fmt: skip


def plan_signature(
    cfg: DataConfig, store: TokenStore, weights: list[float] | None
) -> dict[str, Any]:
    """What decides the plans: the data keys, the mixing weights and the store's identity."""
    out: dict[str, Any] = {f"data.{k}": getattr(cfg, k) for k in PLAN_KEYS}
    out["data.sources weights"] = list(weights) if weights else None
    out[MIXTURE_KEY] = mixture_signature(cfg)
    out["store"] = {
        "documents": store.n_docs,
        "tokens": store.n_tokens,
        "fingerprint": store_identity(store.manifest.get("fingerprint")),
    }
    return out


def check_plan_signature(
    saved: dict[str, Any], current: dict[str, Any], mixture_may_change: bool = False
) -> None:
    """Raise ConfigError naming every key whose value differs from the checkpoint's (the
    mixture's only without data.mixture_change_on_resume)."""
    changed = [
        f"{k}: {saved.get(k)!r} in the checkpoint, {current.get(k)!r} now"
        for k in sorted(set(saved) | set(current))
        if saved.get(k) != current.get(k) and not (k == MIXTURE_KEY and mixture_may_change)
    ]
    if changed:
        mixture = any(c.startswith(MIXTURE_KEY) for c in changed)
        raise ConfigError(
            "cannot resume the data position: the data config differs from the checkpoint's ("
            + "; ".join(changed)
            + "). Resume with the same data settings, or start a new run"
            + (
                " (or give data.mixture_change_on_resume=true to continue under the new shares)."
                if mixture
                else "."
            )
        )
