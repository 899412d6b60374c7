"""Is a token store what its manifest says? Sizes, checksums, counts, the manifest itself.

Checked every time a store is opened from the cache, so a truncated, edited or half-written
store is rebuilt (with a log line naming the file and why) instead of read:
1. `verify_manifest`: the manifest's own checksum, and counts.tokens against tokens.bin's size;
2. `verify_files`: each file's size against the manifest;
3. `verify_offsets`: the document offsets against the manifest's counts;
4. `verify_checksums`: each file's checksum (all of a small file, 256 blocks of a large one).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from packlm.data.store.layout import MANIFEST_FILE, OFFSETS_FILE, TOKENS_FILE

CHECKSUM_FULL_BYTES = 16 << 20
"""Files up to this size are hashed whole; larger ones by CHECKSUM_BLOCKS evenly spaced blocks."""
CHECKSUM_BLOCKS = 256
CHECKSUM_BLOCK_BYTES = 64 << 10


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """blake2b of the canonical JSON of the manifest without its own checksum."""
    body = {k: v for k, v in manifest.items() if k != "manifest_checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def verify_manifest(path: Path, manifest: dict[str, Any]) -> str | None:
    """The manifest's own checksum (absent in old stores), then counts.tokens against the
    recorded size of tokens.bin (`verify_files` compares the sizes with the disk)."""
    where, expected = path / MANIFEST_FILE, manifest.get("manifest_checksum")
    if expected is not None and manifest_checksum(manifest) != expected:
        return f"{where}: edited since it was written (its checksum does not match its content)"
    try:
        n_tokens, size = int(manifest["counts"]["tokens"]), manifest.get("files", {})
        int(manifest["counts"].get("documents", 0))
        if not all(isinstance(manifest.get(k, {}), dict) for k in ("files", "checksums")):
            raise TypeError("files and checksums are not objects")
        itemsize, size = np.dtype(manifest["dtype"]).itemsize, size.get(TOKENS_FILE)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        return f"{where}: incomplete manifest ({type(e).__name__}: {e})"
    if n_tokens < 0 or size not in (None, n_tokens * itemsize):
        return f"{where}: counts.tokens={n_tokens} does not match {TOKENS_FILE} ({size} bytes)"
    return None


def verify_offsets(path: Path, manifest: dict[str, Any], store: Any) -> str | None:
    """Offsets and sources agree with the manifest's counts (reads two offsets)."""
    counts, offsets, n = manifest["counts"], store.doc_offsets, len(store.doc_sources)
    n_docs, n_tokens = int(counts.get("documents", n)), int(counts["tokens"])
    if offsets.ndim != 1 or len(offsets) != n_docs + 1 or n != n_docs:
        return f"{path / OFFSETS_FILE}: {len(offsets) - 1} documents, manifest says {n_docs}"
    if int(offsets[0]) != 0 or int(offsets[-1]) != n_tokens:
        return f"{path / OFFSETS_FILE}: ends at token {int(offsets[-1])}, manifest says {n_tokens}"
    return None


def verify_files(path: Path, manifest: dict[str, Any]) -> str | None:
    """Compare the files' sizes with the manifest; return what is wrong, or None."""
    for name, size in manifest.get("files", {}).items():
        file = path / name
        if not file.is_file():
            return f"{file}: missing"
        actual = file.stat().st_size
        if actual != size:
            return f"{file}: {actual} bytes, manifest says {size} (truncated or edited)"
    return None


def file_checksum(path: Path) -> str:
    """blake2b of a file: all of it up to CHECKSUM_FULL_BYTES, else its size plus 256 blocks of
    64 KiB at evenly spaced offsets (first and last included): at most 16 MiB read per file."""
    size = path.stat().st_size
    h = hashlib.blake2b(str(size).encode(), digest_size=16)
    with open(path, "rb") as f:
        if size <= CHECKSUM_FULL_BYTES:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        else:
            last = size - CHECKSUM_BLOCK_BYTES
            for k in range(CHECKSUM_BLOCKS):
                f.seek(last * k // (CHECKSUM_BLOCKS - 1))
                h.update(f.read(CHECKSUM_BLOCK_BYTES))
    return h.hexdigest()


def verify_checksums(path: Path, manifest: dict[str, Any], names=None) -> str | None:
    """Compare the files' checksums with the manifest (reads up to 16 MiB a file); return what
    is wrong, or None. Manifests written before checksums existed pass."""
    problem = verify_files(path, manifest)
    if problem:
        return problem
    for name, expected in manifest.get("checksums", {}).items():
        if names is not None and name not in names:
            continue
        actual = file_checksum(path / name)
        if actual != expected:
            return f"{path / name}: content changed since it was written (checksum {actual}, manifest says {expected})"
    return None


DECODE_BLOCK = 1 << 24
"""Tokens read at a time by `decoded_bytes` (64 MiB of uint32): memory stays flat."""


def decoded_bytes(path: Path, dtype, byte_lengths: np.ndarray, progress=None) -> int:
    """UTF-8 bytes the tokens in the file `path` decode to (special tokens count 0), read
    block by block into memory (not through a memmap, whose pages would stay mapped and
    count as the process's memory); `progress(n)` gets the tokens of each block."""
    counts = np.zeros(len(byte_lengths), dtype=np.int64)
    with open(path, "rb") as f:
        while (block := np.fromfile(f, dtype=dtype, count=DECODE_BLOCK)).size:
            counts += np.bincount(block, minlength=len(byte_lengths))[: len(byte_lengths)]
            if progress is not None:
                progress(block.size)
    return int(counts @ byte_lengths)
