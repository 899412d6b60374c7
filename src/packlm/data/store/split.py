"""Train/validation split by a stable hash of each document's content.

The hash depends on the text alone (not its path, position or machine), so every run on
every machine splits the same documents the same way, and identical documents always land
in the same split: with the hash split no validation document can repeat a training one.
With explicit `data.val_sources` that guarantee is gone, so `TrainHashes` remembers the
training documents' hashes (8 bytes each, not their text) to drop exact duplicates.
"""

from __future__ import annotations

import hashlib
from array import array

import numpy as np

HASH = "blake2b-64"
"""Recorded in the fingerprint: changing the hash changes every split."""


def content_hash(data: bytes) -> int:
    """64-bit hash of a document's UTF-8 bytes."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def is_validation(h: int, fraction: float) -> bool:
    """True for about `fraction` of all hashes; the same answer for the same content."""
    return h < int(fraction * 2**64)


class TrainHashes:
    """The training documents' hashes: appended while streaming, then searched in bulk."""

    def __init__(self) -> None:
        self._pending = array("Q")
        self._sorted = np.zeros(0, dtype=np.uint64)

    def add(self, h: int) -> None:
        self._pending.append(h)

    def __contains__(self, h: int) -> bool:
        if self._pending:
            merged = np.concatenate([self._sorted, np.frombuffer(self._pending, dtype=np.uint64)])
            self._sorted = np.unique(merged)
            self._pending = array("Q")
        i = int(np.searchsorted(self._sorted, np.uint64(h)))
        return i < len(self._sorted) and int(self._sorted[i]) == h
