"""The data without Lightning or torch: config -> tokenizer + stores -> per-epoch plans.

`EpochPlans` is what `PackedDataModule` (the LightningDataModule) adds loaders, ranks and
logging to, and what `python -m packlm.stats` uses alone, so inspecting a plan starts in
about a second and never imports torch:
1. `prepare_data`: train or load the tokenizer and build both token stores (cached).
2. `setup`: open the stores (memory-mapped) and read their document lengths.
3. `plan(epoch, split, phase)`: the epoch plan, a pure function of (store, data config,
   seed, epoch), one epoch per split kept.
4. `plan_statistics(...)`: what that plan does to the data (samples, fill, multiplicity).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from packlm.cache import DEFAULT_CACHE_DIR
from packlm.cache.entry import temporary_sibling
from packlm.cache.lock import locked
from packlm.config.data import DataConfig
from packlm.config.mixture import is_mixture, mixture_names
from packlm.config.sources import source_weight
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.epoch import curriculum
from packlm.data.epoch.chat_mask import ChatMask
from packlm.data.epoch.mixture.allocation import Allocation
from packlm.data.epoch.mixture.expected import MixtureRates, per_row_tokens, phase_table
from packlm.data.epoch.mixture.streams import SourceStreams, source_config, source_plan
from packlm.data.epoch.order import directory_groups
from packlm.data.epoch.plan import EpochPlan, build_plan
from packlm.data.epoch.snap import ParagraphIndex
from packlm.data.epoch.statistics import plan_statistics
from packlm.data.epoch.windows import validation_config
from packlm.data.skip import resolve_documents
from packlm.data.store.prepared import prepare_stores
from packlm.data.store.token_store import TokenStore
from packlm.data.store.union import open_store
from packlm.tokenizer.obtain import TOKENIZERS_DIR
from packlm.tokenizer.tokenizer import Tokenizer

log = logging.getLogger(__name__)


class EpochPlans:
    """The epoch plans of `data.*`; build with the data keys as keyword arguments
    (`EpochPlans(window=128, ...)`) or `data=DataConfig(...)`; an unknown or invalid key
    raises ConfigError naming it. `tokenizer`: the `tokenizer.*` keys (a mapping, trained
    and cached) or a `packlm.tokenizer.Tokenizer` (its special tokens must include
    "<|pad|>").

    `prepared` (a `packlm.data.store.prepared.PreparedData`) skips building: tests and tools that
    already have stores pass it.
    """

    def __init__(
        self,
        tokenizer: TokenizerConfig | Mapping | Tokenizer | None = None,
        cache_dir: str | Path = DEFAULT_CACHE_DIR,
        model_context: int | None = None,
        data: DataConfig | None = None,
        prepared: Any = None,
        progress: bool = True,
        **data_keys: Any,
    ):
        if data_keys:  # Hydra's instantiate, or keyword arguments
            data = DataConfig.from_mapping({**(asdict(data) if data else {}), **data_keys})
        self.data = DataConfig.from_mapping(data).validate(model_context)
        self._given_tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else None
        if self._given_tokenizer is not None:  # saved into the cache by prepare_data
            tokenizer = {"special_tokens": tokenizer.special_tokens, "pattern": tokenizer.pattern}
        self.tokenizer_config = TokenizerConfig.from_mapping(tokenizer)
        self.cache_dir = Path(cache_dir)
        self.progress = progress
        self.prepared = prepared
        if self.data.stride > self.data.window:
            d = self.data
            log.warning(
                "data.stride=%d > data.window=%d: %d tokens between windows are never a target",
                d.stride, d.window, d.stride - d.window,
            )  # fmt: skip
        self._stores: dict[str, TokenStore] = {}
        self._lengths: dict[str, np.ndarray] = {}
        self._plans: dict[tuple[str, int, int], EpochPlan] = {}
        self._streams: dict[tuple[int, int], SourceStreams] = {}  # a mixture's, per batch
        self._source_configs: dict[int, DataConfig] = {}  # a mixture's, per source
        self._paragraph_index: ParagraphIndex | None = None  # a mixture's passes share it
        self.phases = curriculum.phases_of(self.data)  # one phase without data.curriculum
        self._stats: dict[tuple[str, int], dict[str, Any]] = {}  # the latest epoch's only

    @classmethod
    def from_config(cls, config: Any, cache_dir: str | Path, **kwargs: Any):
        """The plans (or DataModule) of a validated config (`packlm.config.schema.Validated`: data,
        tokenizer, model), as train.py and stats build it."""
        context = config.model.context_length
        return cls(config.tokenizer, cache_dir, context, data=config.data, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (spawned processes): open stores and plans are rebuilt, never copied."""
        state = dict(self.__dict__)
        state.update(_stores={}, _lengths={}, _plans={}, _streams={}, _paragraph_index=None)
        return state

    # --- preparation -------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Train or load the tokenizer and build the stores (cached; Lightning: once per node)."""
        if self.prepared is None:
            if self._given_tokenizer is not None:
                self.tokenizer_config = self._save_given_tokenizer()
            self.prepared = prepare_stores(
                self.data, self.tokenizer_config, self.cache_dir, self.progress
            )

    def _save_given_tokenizer(self) -> TokenizerConfig:
        """A `Tokenizer` object passed as `tokenizer`: saved once under the cache (by its
        digest, written to a temporary name and renamed), then loaded like `tokenizer.path`."""
        tok = self._given_tokenizer
        dest = self.cache_dir.expanduser().resolve() / TOKENIZERS_DIR / f"given-{tok.digest()}"
        if not dest.is_dir():
            with locked(dest):
                if not dest.is_dir():
                    tmp = temporary_sibling(dest)
                    tok.save(tmp)
                    tmp.rename(dest)
        return TokenizerConfig.from_mapping(
            {"path": str(dest), "special_tokens": tok.special_tokens, "pattern": tok.pattern}
        )

    def setup(self, stage: str | None = None) -> None:
        """Open the stores (every process); cheap when already done."""
        self.prepare_data()
        for split, path in (("train", self.prepared.train_dir), ("val", self.prepared.val_dir)):
            if split not in self._stores:
                store = open_store(path)  # the shards' union with data.shards
                self._stores[split] = store
                lengths = np.diff(np.asarray(store.doc_offsets))  # int64 [n_docs], EOS included
                self._lengths[split] = lengths + 1 if self.data.bos else lengths  # + the BOS

    def skipped_documents(self) -> np.ndarray:
        """int64 sorted training documents of data.skip_documents (resolved once, right after
        the store is opened: an unknown index or id is a ConfigError before any training)."""
        if "skip_documents" not in self._lengths:
            self._lengths["skip_documents"] = resolve_documents(
                self.store("train"), self.data.skip_documents
            )
        return self._lengths["skip_documents"]

    def store(self, split: str = "train") -> TokenStore:
        self.setup()
        return self._stores[split]

    @property
    def tokenizer(self) -> Any:
        self.prepare_data()
        return self.prepared.tokenizer

    @property
    def vocab_size(self) -> int:
        tok = self.tokenizer
        return int(tok.vocab_size if tok is not None else self.store().manifest["vocab_size"])

    @property
    def pad_id(self) -> int:
        return self.store().pad_id

    @property
    def eos_id(self) -> int:
        return self.store().eos_id

    @property
    def token_byte_lengths(self) -> Any:
        """UTF-8 bytes of each token id (for bits per byte)."""
        return self.tokenizer.token_byte_lengths()

    @property
    def source_weights(self) -> list[float]:
        return [source_weight(e) for e in self.data.sources]

    # --- plans ---------------------------------------------------------------------------
    def plan(self, epoch: int, split: str = "train", phase: int | None = None) -> EpochPlan:
        """The epoch plan of a split (validation: the fixed windows, the same every epoch);
        `phase`: a curriculum phase's (default: the last, whose window is data.window)."""
        phase = len(self.phases) - 1 if phase is None or split == "val" else phase
        key = (split, 0 if split == "val" else epoch, phase)
        if key not in self._plans:
            self.setup()
            if split == "val":
                plan = build_plan(self._lengths["val"], validation_config(self.data), 0)
                plan.chat_mask = self._chat_mask("val")
            else:
                store = self._stores["train"]
                cfg = curriculum.phase_config(self.data, self.phases[phase])
                plan = build_plan(
                    self._lengths["train"],
                    cfg if self.data.curriculum else self.data,
                    epoch,
                    np.asarray(store.doc_sources),
                    self.source_weights,
                    self._doc_groups(store),
                    self._paragraph_starts(store),
                )
                plan.chat_mask = self._chat_mask("train")
            # keep one epoch per split (a curriculum's phases of that epoch)
            self._plans = {k: v for k, v in self._plans.items() if k[0] != split or k[1] == epoch}
            self._plans[key] = plan
        return self._plans[key]

    # --- a mixture by share (packlm.data.epoch.mixture) --------------------------------------
    @property
    def mixture(self) -> bool:
        return is_mixture(self.data)

    def source_plan(self, source: int, pass_: int) -> EpochPlan:
        """Pass `pass_` of one source's stream (`packlm.data.epoch.mixture.streams`)."""
        self.setup()
        store = self._stores["train"]
        key = f"source {source}"
        if key not in self._lengths:  # its store documents, found once
            self._lengths[key] = np.flatnonzero(np.asarray(store.doc_sources) == source)
        starts, paragraphs = self._paragraph_starts(store), None
        if starts is not None:  # data.snap=paragraph: indexed once for every pass
            if self._paragraph_index is None:
                lengths = self._lengths["train"]
                self._paragraph_index = ParagraphIndex.of(starts, lengths, self.data.bos)
            paragraphs = self._paragraph_index
        if source not in self._source_configs:
            self._source_configs[source] = source_config(self.data, source)
        plan = source_plan(
            self._lengths["train"], self._source_configs[source], pass_, self._lengths[key],
            self._doc_groups(store), paragraphs,
        )  # fmt: skip
        plan.chat_mask = self._chat_mask("train")
        return plan

    def _chat_mask(self, split: str) -> ChatMask | None:
        """A split's store with conversations: its role mask under data.chat_supervised, so
        the curriculum and the plan statistics count the labels the loader gives (None:
        plain text, every target counts)."""
        return ChatMask.of(self._stores[split], self.data.chat_supervised, self.data.bos)

    def streams(self, rows: int, accumulate: int = 1) -> SourceStreams:
        """The mixture's per-source streams, dealt in global batches of `rows` rows (all
        ranks), `accumulate` of them an optimizer step (the schedule's unit); kept."""
        key = (rows, accumulate)
        if key not in self._streams:
            allocation = Allocation.of(self.data, rows, accumulate)
            names = mixture_names(self.data)
            streams = SourceStreams(self.source_plan, names, allocation, self.data.seed)
            streams.check()  # a source with a share and no document: refused before training
            self._streams[key] = streams
        return self._streams[key]

    def mixture_rates(self, rows: int, accumulate: int = 1) -> MixtureRates:
        """Expected supervised tokens of the mixture after n global batches, and back."""
        streams = self.streams(rows, accumulate)
        doc_sources = np.asarray(self.store("train").doc_sources)
        return MixtureRates(streams, per_row_tokens(streams, doc_sources))

    def mixture_statistics(self, rows: int, accumulate: int = 1) -> dict[str, Any]:
        """The mixture's sources and phases with their expected supervised tokens."""
        rates = self.mixture_rates(rows, accumulate)
        return phase_table(self.streams(rows, accumulate), rates.per_row, accumulate)

    def _doc_groups(self, store: TokenStore) -> np.ndarray | None:
        """The group of each training document under data.group_by (None: no grouping)."""
        if self.data.group_by == "source":
            return np.asarray(store.doc_sources)
        if self.data.group_by == "directory" and "directory" not in self._lengths:
            ids = [store.doc_id(d) for d in range(store.n_docs)]  # once, not every epoch
            self._lengths["directory"] = directory_groups(ids)  # kept with the store arrays
        return self._lengths.get("directory")

    def _paragraph_starts(self, store: TokenStore) -> np.ndarray | None:
        """The training store's paragraph starts under data.snap=paragraph (read once)."""
        if self.data.snap == "paragraph" and "paragraphs" not in self._lengths:
            self._lengths["paragraphs"] = store.paragraph_starts(self.tokenizer)
        return self._lengths.get("paragraphs")

    def plan_statistics(
        self, epoch: int, split: str = "train", phase: int | None = None
    ) -> dict[str, Any]:
        """`packlm.data.epoch.statistics.plan_statistics` of one epoch (a curriculum phase's:
        default the last), with per-source counts (cached: the token budget and the epoch's
        logging both ask for epoch 0)."""
        key = (split, epoch, len(self.phases) - 1 if phase is None else phase)
        if key not in self._stats:
            store = self.store(split)
            plan = self.plan(epoch, split, key[2])
            stats = plan_statistics(plan, np.asarray(store.doc_sources), store.source_names)
            self._stats = {k: v for k, v in self._stats.items() if k[:2] == key[:2]}
            self._stats[key] = stats
        return self._stats[key]

    def supervised_tokens_per_batch(self, phase: int | None = None) -> float:
        """Expected supervised targets in one batch of one rank (sizes token budgets);
        `phase`: of a curriculum phase (default: the last)."""
        stats = self.plan_statistics(0, phase=phase)
        return stats["supervised_tokens"] / max(stats["samples"], 1) * self.data.batch_size

    def phase_at(self, tokens: int) -> curriculum.Phase:
        """The curriculum phase of a batch before which `tokens` targets were trained."""
        return self.phases[curriculum.phase_at(self.phases, tokens)]
