"""The corpus of a data config: resolved sources, reading options and the split rule.

It answers the questions asked before any token exists: which documents train the
tokenizer (the training split only), and what the stores' contents depend on (the
fingerprint: sources with sizes and mtimes, and every option that changes documents).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from packlm.config.data import DataConfig
from packlm.config.sources import source_chat
from packlm.data.store.shards import file_shards, piece_bounds
from packlm.data.store.sources import (
    ReadCounts,
    ReadOptions,
    Source,
    SourceError,
    iter_documents,
    resolve_sources,
)
from packlm.data.store.sources.conversations import RECORDS
from packlm.data.store.sources.cuts import file_cuts
from packlm.data.store.sources.formats import detect
from packlm.data.store.split import HASH, content_hash, is_validation
from packlm.tokenizer.chat import CHAT_FORMAT

log = logging.getLogger(__name__)

OVERLONG = "conversations longer than a sample left out (data.chat_overflow; raise data.window)"
"""What an empty split says of the conversations that data.chat_overflow left out."""
BUILD_VERSION = 2
"""Part of every fingerprint: bump it when the same inputs would give other documents or stores."""


@dataclass
class Corpus:
    sources: list[Source]
    val_sources: list[Source] | None
    options: ReadOptions
    val_fraction: float
    shard: tuple[int, int] | None = None
    """(i, N) of data.shard: `sources` hold only the shard's files or pieces (`Corpus.shards`)."""
    other_training: list[Source] | None = None
    """Shard 0 with data.val_sources: the other shards' training files, read (not stored)
    so that a validation document duplicating any training document is dropped."""

    @classmethod
    def from_config(cls, data: DataConfig) -> Corpus:
        """Resolve every source now: a missing path or empty glob fails before any work."""
        val = (
            None
            if data.val_sources is None
            else _with_chat(resolve_sources(list(data.val_sources), "data.val_sources"),
                            data.val_sources)
        )  # fmt: skip
        return cls(
            _with_chat(resolve_sources(list(data.sources)), data.sources),
            val,
            ReadOptions.from_config(data),
            data.val_fraction,
        )

    def shards(self, n: int) -> list[Corpus]:
        """The n shards (`packlm.data.store.shards`): each source keeps its files, or pieces
        of files, of the shard (and its special-file count in the shard of its first file).
        The hash split sends each document where one store would; explicit data.val_sources
        all go to shard 0, which reads the other shards' training documents for duplicates."""
        files = [(source, k) for source in self.sources for k in range(len(source.files))]
        if len(files) >= n:
            sizes = np.array([size for s in self.sources for _, size, _ in s.stats])
            held = file_shards(sizes, n)[:, None] == np.arange(n)  # [files, n]
            pieces, rest = [[None] * n for _ in files], [None] * len(files)
        else:
            held, pieces, rest = self._pieces(files, n)
            empty = [f"{i}/{n}" for i in range(n) if not held[:, i].any()]
            if empty:
                log.warning(
                    "data.shard: %s read nothing, so their stores are empty (the union of the "
                    "%d shards is still the whole corpus): the %d source files hold too few "
                    "places to cut between records for %d shards", ", ".join(empty), n,
                    len(files), n,
                )  # fmt: skip
        out = []
        for i in range(n):
            mine = [  # a source's special files count in the first shard holding its first file
                _files_of(s, held[rows, i], i == int(np.argmax(held[rows.start])),
                          [p[i] for p in pieces[rows]])
                for s, rows in _rows(self.sources)
            ]  # fmt: skip
            others = None
            if self.val_sources is not None and i == 0:
                others = [
                    _files_of(s, held[rows, 1:].any(axis=1), False, rest[rows])
                    for s, rows in _rows(self.sources)
                ]
            out.append(replace(
                self,
                sources=mine,
                val_sources=self.val_sources if i == 0 or self.val_sources is None else [],
                shard=(i, n),
                other_training=others,
            ))  # fmt: skip
        return out

    def of_shard(self, i: int, n: int) -> Corpus:
        """Shard i of n (`shards`)."""
        return self.shards(n)[i]

    def _pieces(self, files: list[tuple[Source, int]], n: int):
        """Fewer files than shards, so files are cut between records (`piece_bounds`):
        (held bool [files, n]; per file and shard the bytes read, None: all of them; per file
        the bytes after shard 0's)."""
        whole_files = replace(self.options, separator=None)  # the default corpus: one per file
        cuts = [
            file_cuts(s.files[k], detect(s.files[k]), self.options if s.root is None else
                      whole_files, s.span, s.stats[k][1])
            for s, k in files
        ]  # fmt: skip
        bounds, held, cut_in = piece_bounds(cuts, n)
        for k in sorted({int(k) for k in cut_in if k < len(files) and cuts[k].whole}):
            log.info(
                "data.shard: %s is %s, so it cannot be cut between records: shard %d/%d reads it "
                "whole", cuts[k].path, cuts[k].whole, int(np.argmax(held[k])), n,
            )  # fmt: skip

        def piece(f: int, a: int, b: int) -> tuple[int, int] | None:
            return None if (a, b) == (cuts[f].lo, cuts[f].hi) else (int(a), int(b))

        pieces = [[piece(f, row[j], row[j + 1]) for j in range(n)] for f, row in enumerate(bounds)]
        rest = [piece(f, row[1], row[n]) for f, row in enumerate(bounds)]
        return held, pieces, rest

    @property
    def has_chat(self) -> bool:
        """Does a source hold conversations ({path, chat: form})?"""
        return any(s.chat is not None for s in self.sources + (self.val_sources or []))

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
        counts, n, n_read = ReadCounts(), 0, 0
        for doc in iter_documents(self.sources, self.options, counts):
            n_read += 1
            if not self.goes_to_validation(doc.text.encode("utf-8")):
                n += 1
                yield doc.text
        if n == 0:
            raise self.no_documents(counts, to_validation=n_read > 0)

    def no_documents(
        self, counts: ReadCounts, overlong: int = 0, to_validation: bool = True
    ) -> SourceError:
        """The error of an empty training split, naming every reason; `overlong`: the
        conversations that data.chat_overflow left out (none of their turns fit a sample);
        `to_validation`: the hash split sent documents to validation."""
        names = [s.name for s in self.sources]
        dropped = counts.dropped()
        why = ", ".join(f"{n} {reason}" for reason, n in dropped.items())
        hint = ""
        if overlong:
            why += f", {overlong} {OVERLONG}"
        sent = to_validation and self.hash_split and self.val_fraction > 0
        if sent:  # else nothing went to validation
            why += f", the rest sent to validation by data.val_fraction={self.val_fraction}"
        if sent and not overlong:
            hint = (
                "; a file is one document unless data.separator splits it, so hold out a part "
                "of it instead: data.sources=[{path: F, span: [0, 0.9]}] "
                "data.val_sources=[{path: F, span: [0.9, 1]}]"
            )
        if not (sent or overlong or any(dropped.values())):
            why = "the files hold no text or record"
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
    if source.chat is not None:  # absent for text: the keys of earlier entries still hold
        fp["chat"] = {"form": source.chat, "format": CHAT_FORMAT, "records": RECORDS}
    return fp


def _with_chat(sources: list[Source], entries: Any) -> list[Source]:
    """The sources with their entries' `chat` form (conversations; None: text)."""
    return [replace(s, chat=source_chat(e)) for s, e in zip(sources, entries, strict=True)]


def _rows(sources: list[Source]) -> Iterator[tuple[Source, slice]]:
    """Each source with the rows of its files among all sources' files."""
    first = 0
    for source in sources:
        yield source, slice(first, first + len(source.files))
        first += len(source.files)


def _files_of(
    source: Source, keep: np.ndarray, specials: bool, cuts: list[tuple[int, int] | None]
) -> Source:
    """The source with only the files where `keep`, each read whole or its bytes `cuts[f]`;
    what its walk left out (special files, links) counted if `specials`."""
    kept = [f for f, k in enumerate(keep) if k]
    piece = [cuts[f] for f in kept]
    return replace(
        source,
        files=[source.files[f] for f in kept],
        stats=[source.stats[f] for f in kept],
        skipped=source.skipped if specials else {},
        cuts=piece if any(c is not None for c in piece) else None,
    )
