"""The token store's file layout, written down once: names, format version, dtype, writer.

A store directory (one per split):

    tokens.bin        all documents' ids back to back, uint16 when the vocab fits, else uint32;
                      every document ends with one EOS
    doc_offsets.npy   int64 [n_docs + 1]; document d is tokens[offsets[d]:offsets[d+1]]
    doc_sources.npy   int32 [n_docs]; index into manifest["sources"] (for mixing weights)
    doc_ids.txt       one stable id per line ("source:path[:record]"), for tracing samples
    roles.bin         only in a store holding conversations: uint8 [n_tokens], each token's
                      role code (`packlm.tokenizer.chat`: 0 plain text, 1 chat markup, 2..5
                      a system / user / assistant / tool turn), from which a batch's
                      supervision mask is made; absent: every token is plain text
    manifest.json     format version, fingerprint, counts, file sizes, file checksums, and
                      the checksum of the manifest itself

The reader (`token_store.py`), the checks (`verify.py`) and the paragraph cache
(`paragraphs.py`) all take the names from here.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

FORMAT_VERSION = 1
TOKENS_FILE = "tokens.bin"
OFFSETS_FILE = "doc_offsets.npy"
SOURCES_FILE = "doc_sources.npy"
IDS_FILE = "doc_ids.txt"
MANIFEST_FILE = "manifest.json"
ROLES_FILE = "roles.bin"
DATA_FILES = (TOKENS_FILE, OFFSETS_FILE, SOURCES_FILE, IDS_FILE)
"""Every store's files; ROLES_FILE besides them where the manifest lists it."""


class StoreError(RuntimeError):
    """A store directory that is missing, partial, or does not match its manifest."""


def write_npy(file: str | os.PathLike | Any, array: np.ndarray) -> None:
    """`np.save` (format 1.0, the same bytes) through the file's `write`: numpy's own writes a
    real file with `tofile`, which reports a full disk as `[Errno None] N requested and M
    written`; this raises the OS error (ENOSPC), which the callers call "disk full"."""
    if not hasattr(file, "write"):
        with open(file, "wb") as f:
            write_npy(f, array)
        return
    array = np.ascontiguousarray(array)
    np.lib.format.write_array_header_1_0(file, np.lib.format.header_data_from_array_1_0(array))
    file.write(array.data.cast("B"))


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)
