"""Paragraph starts of a token store (for `data.snap=paragraph`), derived once and cached.

Definition: token i of a document (not its first) **starts a paragraph** when it holds a
non-whitespace byte and the whitespace run just before its first such byte (the trailing
whitespace of the document's bytes before token i, plus token i's leading whitespace)
contains at least two newlines: the first text after a blank line ("\\n\\n", "\\n  \\n",
"\\n\\n    def" all count; a lone "\\n" does not). Special tokens (EOS) count as no bytes.

Computed from the store's tokens and the tokenizer's bytes per id without decoding: per
id, the newlines of its leading and trailing whitespace, whether it has text; per token,
the newlines since the last text token (a running sum restarted at text tokens and
document starts). Tokens are read in chunks of CHUNK (about 60 bytes per token of a chunk
in temporaries), so memory is bounded whatever the store size. The result, sorted store
positions (uint32 when the store has < 2^32 tokens, else int64: 4 or 8 bytes per paragraph
start, typically 0.02-0.1 bytes per token), is cached in the store directory as
`paragraphs-<key>.npy` (written to a temporary name, then renamed), keyed by the store's
manifest checksum, the token bytes and this definition's version; it is opened as a memmap.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packlm.data.store.layout import write_npy

log = logging.getLogger(__name__)

VERSION = 1  # of the definition above: a new one gives a new cache key
CHUNK = 1 << 20  # tokens per vectorised step
WHITESPACE = b" \t\n\r\x0b\x0c"


def token_table(tokenizer: Any) -> list[bytes]:
    """Bytes of every id of a packlm Tokenizer, special tokens as b"" (they are no text)."""
    special = set(getattr(tokenizer, "special_token_ids", {}).values())
    return [b"" if i in special else tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)]


def token_facts(table: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per id (one pass over the vocabulary, not the tokens): (int64 newlines of its leading
    whitespace, int64 newlines it adds to a run before the next text: all of them for a
    whitespace-only token, those of its trailing whitespace otherwise, bool has text)."""
    lead = np.zeros(len(table), dtype=np.int64)
    run = np.zeros(len(table), dtype=np.int64)
    text = np.zeros(len(table), dtype=bool)
    for i, b in enumerate(table):
        core = b.strip(WHITESPACE)
        if not core:
            run[i] = b.count(b"\n")
            continue
        text[i] = True
        lead[i] = b[: len(b) - len(b.lstrip(WHITESPACE))].count(b"\n")
        run[i] = b[len(b.rstrip(WHITESPACE)) :].count(b"\n")
    return lead, run, text


def paragraph_starts(
    tokens: np.ndarray, doc_offsets: np.ndarray, table: Sequence[bytes]
) -> np.ndarray:
    """Sorted store positions of the paragraph starts (module doc), chunk by chunk."""
    lead, run, text = token_facts(table)
    n = len(tokens)
    offsets = np.asarray(doc_offsets, dtype=np.int64)
    dtype = np.uint32 if n < 2**32 else np.int64
    found = [np.zeros(0, dtype)]
    total, at_marker = 0, 0  # newlines before the chunk; the running sum at the last marker
    for lo in range(0, n, CHUNK):
        ids = np.asarray(tokens[lo : lo + CHUNK], dtype=np.int64)  # [c]
        doc_first = np.zeros(len(ids), dtype=bool)
        firsts = offsets[np.searchsorted(offsets, lo) : np.searchsorted(offsets, lo + len(ids))]
        doc_first[firsts - lo] = True
        marker = text[ids] | doc_first  # a run of newlines restarts here
        before = total + np.cumsum(run[ids]) - run[ids]  # [c] newlines before each token
        # [c] the running sum at the last marker <= i (before a chunk's first: the carry)
        last = np.maximum.accumulate(np.where(marker, before, at_marker))
        since = before - np.r_[at_marker, last[:-1]]  # newlines since the last marker < i
        start = text[ids] & ~doc_first & (since + lead[ids] >= 2)
        found.append((np.flatnonzero(start) + lo).astype(dtype))
        total, at_marker = int(before[-1] + run[ids[-1]]), int(last[-1])
    return np.concatenate(found)


def cache_key(manifest: dict[str, Any], table: Sequence[bytes]) -> str:
    """The store's identity (manifest checksum, else its checksums) + token bytes + VERSION."""
    h = hashlib.blake2b(digest_size=8)
    checksums = sorted(manifest.get("checksums", {}).items())
    identity = manifest.get("manifest_checksum") or repr(checksums)
    h.update(f"{VERSION}:{identity}:{manifest.get('counts')}".encode())
    for b in table:
        h.update(len(b).to_bytes(4, "little") + b)
    return h.hexdigest()


def cached_paragraph_starts(store: Any, table: Sequence[bytes]) -> np.ndarray:
    """The store's paragraph starts, from its cache file (a memmap) or computed and cached.
    A cache file that is not what this module writes (cut short, emptied, overwritten) is
    said so and rebuilt from the store: it is derived, never a reason to fail a run."""
    path = Path(store.path) / f"paragraphs-{cache_key(store.manifest, table)}.npy"
    if path.is_file():
        starts, damage = _open_checked(path, len(store.tokens))
        if damage is None:
            return starts
        log.warning("%s: a damaged paragraph index (%s): rebuilt from the store", path, damage)
    starts = paragraph_starts(store.tokens, np.asarray(store.doc_offsets), table)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            write_npy(f, starts)
        os.replace(tmp, path)  # concurrent builders write the same bytes: last one wins
    finally:
        tmp.unlink(missing_ok=True)
    return _open_checked(path, len(store.tokens))[0]


def _open_checked(path: Path, n_tokens: int) -> tuple[np.ndarray, str | None]:
    """(the cached starts, None), or (anything, what is wrong with the file): an .npy of one
    dimension, uint32 or int64, strictly increasing store positions (one pass over the
    starts, a few hundredths of the store's bytes)."""
    try:
        try:
            starts = np.load(path, mmap_mode="r")
        except ValueError:  # an empty array (mmap cannot map 0 bytes), or a damaged file
            starts = np.load(path)
    except (OSError, ValueError, EOFError) as e:
        return np.zeros(0, np.int64), f"{type(e).__name__}: {str(e)[:200]}"
    if starts.ndim != 1 or starts.dtype not in (np.uint32, np.int64):
        return starts, f"{starts.dtype} of shape {starts.shape}, not store positions"
    if len(starts) and (starts[-1] >= n_tokens or np.any(np.diff(starts.astype(np.int64)) <= 0)):
        return starts, f"positions not increasing below the store's {n_tokens:,} tokens"
    return starts, None
