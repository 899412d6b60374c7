"""The stores of data.shards=N read as one: the same documents, in the same order, at the
same token offsets as one store of the whole corpus, so every plan is the same plan.

Shard stores (`packlm.data.store.shards`) hold contiguous runs of the corpus's files (or
of byte ranges of its files, cut between records), so concatenating them in shard order is
the one store. `StoreUnion` is that concatenation
as a view: the shards' own memmaps behind `ConcatArray`s (tokens, document offsets
shifted to global token positions, document sources), so opening it in every DataLoader
worker costs what opening one store does. No token is copied.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packlm.data.store.token_store import StoreError, TokenStore

SUMMED = ("documents", "tokens", "bytes", "stored_bytes", "cuts_inside_pretokens",
          "replaced_invalid_utf8", "normalized_newlines")  # fmt: skip
"""Manifest counts that add up over shards (`dropped` adds up reason by reason)."""


def open_store(where: str | os.PathLike | Sequence[str | os.PathLike]) -> TokenStore:
    """A store directory, or the shards' directories of one split in shard order."""
    if isinstance(where, (str, os.PathLike)):
        return TokenStore.open(where)
    return StoreUnion.open(where)


class ConcatArray:
    """1-D arrays (memmaps) as one read-only array, part k's values + `shifts[k]`: int, slice
    and int-array reads; `np.asarray` concatenates (a copy)."""

    def __init__(self, parts: list[np.ndarray], shifts: Sequence[int] | None = None):
        self.parts = parts
        self.shifts = None if shifts is None else np.asarray(shifts, dtype=np.int64)
        self.starts = np.cumsum([0] + [len(p) for p in parts], dtype=np.int64)  # [n_parts + 1]
        self.dtype = parts[0].dtype if self.shifts is None else np.dtype(np.int64)
        self.shape = (int(self.starts[-1]),)

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:] if len(self) else np.zeros(0, self.dtype)
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            k = self._part_of(np.array([start]))[0] if start < stop else 0
            one_part = step == 1 and start < stop and stop <= self.starts[k + 1]
            if one_part and self.shifts is None:  # a view
                return self.parts[k][start - self.starts[k] : stop - self.starts[k]]
            index = np.arange(start, stop, step)
        where = np.asarray(index, dtype=np.int64)
        if where.ndim == 0:
            return self[where.reshape(1)][0]
        where = np.where(where < 0, where + len(self), where)
        if where.size and (where.min() < 0 or where.max() >= len(self)):
            raise IndexError(f"index out of range for {len(self)} values")
        out = np.empty(where.shape, dtype=self.dtype)
        part = self._part_of(where)
        for k in np.unique(part):
            mask = part == k
            out[mask] = self.parts[k][where[mask] - self.starts[k]]
            if self.shifts is not None:
                out[mask] += self.shifts[k]
        return out

    def _part_of(self, where: np.ndarray) -> np.ndarray:
        """The part holding each position (an empty part holds none)."""
        return np.searchsorted(self.starts, where, side="right") - 1


class StoreUnion(TokenStore):
    """Shard stores of one split as one `TokenStore` (`path` is the tuple of their paths)."""

    def __init__(self, parts: list[TokenStore]):
        _check_compatible(parts)
        self.parts = parts
        self.path = tuple(p.path for p in parts)  # type: ignore[assignment]
        self.manifest = union_manifest([p.manifest for p in parts])
        self.tokens = ConcatArray([p.tokens for p in parts])  # type: ignore[assignment]
        bases = self.tokens.starts  # [n_parts + 1] first global token of each shard, then all
        # int64 [n_docs + 1]: each shard's document starts at global positions, then the end
        self.doc_offsets = ConcatArray(  # type: ignore[assignment]
            [p.doc_offsets[:-1] for p in parts] + [np.zeros(1, np.int64)], bases
        )
        self.doc_sources = ConcatArray([p.doc_sources for p in parts])  # type: ignore[assignment]
        self.roles = None  # type: ignore[assignment]
        if any(p.roles is not None for p in parts):  # a plain-text shard's codes are 0
            self.roles = ConcatArray(
                [  # type: ignore[assignment]
                    np.zeros(p.n_tokens, np.uint8) if p.roles is None else p.roles for p in parts
                ]
            )
        self._doc_bases = np.cumsum([0] + [p.n_docs for p in parts])  # [n_parts + 1]
        self._doc_ids = None

    @classmethod
    def open(cls, paths: Sequence[str | os.PathLike]) -> StoreUnion:  # type: ignore[override]
        if not paths:
            raise StoreError("no shard stores to open")
        return cls([TokenStore.open(Path(p)) for p in paths])

    def doc_id(self, d: int) -> str:
        k = int(np.searchsorted(self._doc_bases, d, side="right")) - 1
        return self.parts[k].doc_id(d - int(self._doc_bases[k]))

    def paragraph_starts(self, tokenizer: Any) -> np.ndarray:
        """Each shard's (cached next to it), shifted to global positions: paragraph starts
        are found within documents, so these are one store's."""
        starts = [
            np.asarray(p.paragraph_starts(tokenizer), np.int64) + b
            for p, b in zip(self.parts, self.tokens.starts[:-1], strict=True)
        ]
        return np.concatenate(starts)


def union_manifest(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """One manifest for the union: the shards' shared facts, summed counts, their
    fingerprints (the union's identity), and no file sizes or checksums (those are per shard)."""
    first = manifests[0]
    out = {k: v for k, v in first.items() if k not in ("files", "checksums", "manifest_checksum")}
    counts: dict[str, Any] = {}
    for m in manifests:
        for key, value in m["counts"].items():
            if key in ("dropped", "chat_overflow"):  # by reason; the policy is the shards'
                merged = counts.setdefault(key, {})
                for why, n in value.items():
                    same = why in ("policy", "max_tokens")  # data.chat_overflow's settings
                    merged[why] = n if same else merged.get(why, 0) + n
            elif key in SUMMED:
                counts[key] = counts.get(key, 0) + value
    out["counts"] = counts
    # shards past 0 hold no explicit validation source; every shard lists all training sources
    out["sources"] = [{"name": s["name"]} for s in max((m["sources"] for m in manifests), key=len)]
    out["fingerprint"] = {"shards": [m["fingerprint"] for m in manifests]}
    return out


def _check_compatible(parts: list[TokenStore]) -> None:
    """Shards of one corpus: one tokenizer, dtype, EOS and PAD."""
    keys = ("dtype", "vocab_size", "eos_id", "pad_id", "split")
    facts = [tuple(p.manifest.get(k) for k in keys) for p in parts]
    tokenizers = [p.manifest.get("fingerprint", {}).get("tokenizer") for p in parts]
    if len(set(facts)) > 1 or len(set(tokenizers)) > 1:
        raise StoreError(
            f"the shard stores {[str(p.path) for p in parts]} are not shards of one corpus "
            f"(their {', '.join(keys)} or tokenizers differ)"
        )
