"""The corpus of a data config: resolved sources, reading options and the split rule.

It answers the questions asked before any token exists: which documents train the
tokenizer (the training split only), and what the stores' contents depend on (the
fingerprint: sources with sizes and mtimes, and every option that changes documents).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from packlm.config.data import DataConfig
from packlm.data.store.shards import file_shards
from packlm.data.store.sources import (
    ReadCounts,
    ReadOptions,
    Source,
    SourceError,
    iter_documents,
    resolve_sources,
)
from packlm.data.store.split import HASH, content_hash, is_validation
from packlm.errors import ConfigError

BUILD_VERSION = 2
"""Part of every fingerprint: bump it when the same inputs would give other documents or stores."""


@dataclass
class Corpus:
    sources: list[Source]
    val_sources: list[Source] | None
    options: ReadOptions
    val_fraction: float
    shard: tuple[int, int] | None = None
    """(i, N) of data.shard: `sources` hold only the shard's files (`Corpus.of_shard`)."""
    other_training: list[Source] | None = None
    """Shard 0 with data.val_sources: the other shards' training files, read (not stored)
    so that a validation document duplicating any training document is dropped."""

    @classmethod
    def from_config(cls, data: DataConfig) -> Corpus:
        """Resolve every source now: a missing path or empty glob fails before any work."""
        val = (
            None
            if data.val_sources is None
            else resolve_sources(list(data.val_sources), "data.val_sources")
        )
        return cls(
            resolve_sources(list(data.sources)),
            val,
            ReadOptions.from_config(data),
            data.val_fraction,
        )

    def of_shard(self, i: int, n: int, key: str | None = None) -> Corpus:
        """Shard i of n (`packlm.data.store.shards`): each source keeps its files of the shard
        (and its special-file count in the shard of its first file). The hash split sends each
        document where one store would; explicit data.val_sources all go to shard 0.
        `key`: the config key named when there are fewer files than shards."""
        sizes = np.array([size for s in self.sources for _, size, _ in s.stats], dtype=np.int64)
        if len(sizes) < n:
            raise ConfigError(
                f"{key or f'data.shard={i}/{n}'}: the sources have {len(sizes)} files, fewer "
                f"than {n} shards (a shard is a run of whole files); use at most {len(sizes)}"
            )
        owner = file_shards(sizes, n)  # [files], every shard has one at least
        mine, others, first = [], [], 0
        for source in self.sources:
            own = owner[first : first + len(source.files)]
            first += len(source.files)
            mine.append(_files_of(source, own == i, len(own) > 0 and bool(own[0] == i)))
            others.append(_files_of(source, own != i, False))
        explicit = self.val_sources is not None
        return replace(
            self,
            sources=mine,
            val_sources=None if not explicit else self.val_sources if i == 0 else [],
            shard=(i, n),
            other_training=others if explicit and i == 0 else None,
        )

    @property
    def hash_split(self) -> bool:
        """Validation comes from data.sources by content hash (no data.val_sources)."""
        return self.val_sources is None

    @property
    def total_bytes(self) -> int:
        return sum(s.total_bytes for s in self.sources + (self.val_sources or []))

    def goes_to_validation(self, data: bytes) -> bool:
        """For a document of data.sources: does the hash split send it to validation?"""
        return self.hash_split and is_validation(content_hash(data), self.val_fraction)

    def training_texts(self) -> Iterator[str]:
        """The training split's texts, in order (what the tokenizer is trained on)."""
        counts, n = ReadCounts(), 0
        for doc in iter_documents(self.sources, self.options, counts):
            if not self.goes_to_validation(doc.text.encode("utf-8")):
                n += 1
                yield doc.text
        if n == 0:
            raise self.no_documents(counts)

    def no_documents(self, counts: ReadCounts) -> SourceError:
        names = [s.name for s in self.sources]
        why = ", ".join(f"{n} {reason}" for reason, n in counts.dropped().items())
        hint = ""
        if self.hash_split and self.val_fraction > 0:  # else nothing went to validation
            why += f", the rest sent to validation by data.val_fraction={self.val_fraction}"
            hint = (
                "; a file is one document unless data.separator splits it, so hold out a part "
                "of it instead: data.sources=[{path: F, span: [0, 0.9]}] "
                "data.val_sources=[{path: F, span: [0.9, 1]}]"
            )
        return SourceError(f"data.sources={names}: no training documents ({why}){hint}")

    def fingerprint(self, training_only: bool = False) -> dict[str, Any]:
        """What the documents depend on; `training_only`: only what the training split depends on
        (no val_sources), the key of the tokenizer cache. Mixing weights are applied by the
        epoch plan, never by the store, so changing one rebuilds nothing."""
        fp: dict[str, Any] = {
            "builder": BUILD_VERSION,
            "split_hash": HASH,
            "data.sources": [_source_fp(s) for s in self.sources],
            "data.text_field": self.options.text_field,
            "data.separator": self.options.separator,
            "data.encoding_errors": self.options.encoding_errors,
            "data.normalize_newlines": self.options.normalize_newlines,
            "data.val_fraction": self.val_fraction if self.hash_split else None,
        }
        if not training_only:
            fp["data.val_sources"] = (
                None if self.hash_split else [_source_fp(s) for s in self.val_sources]
            )
        if self.shard is not None:
            fp["data.shard"] = "{}/{}".format(*self.shard)
        if self.other_training is not None:
            fp["duplicates of"] = [_source_fp(s) for s in self.other_training]
        return fp


def _source_fp(source: Source) -> dict[str, Any]:
    fp = source.fingerprint()
    del fp["weight"]  # the plan's business (see fingerprint)
    return fp


def _files_of(source: Source, keep: np.ndarray, specials: bool) -> Source:
    """The source with only the files where `keep`; its special files counted if `specials`."""
    files = [f for f, k in zip(source.files, keep, strict=True) if k]
    stats = [st for st, k in zip(source.stats, keep, strict=True) if k]
    return replace(
        source, files=files, stats=stats, special_files=source.special_files if specials else 0
    )
