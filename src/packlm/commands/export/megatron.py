"""`format=megatron`: Megatron-LM's indexed dataset, `<split>.bin` + `<split>.idx` per split.

The layout (megatron/core/datasets/indexed_dataset.py, "MMIDIDX" version 1), all
little-endian:

    .bin  every sequence's tokens back to back, in the dtype of the .idx
    .idx  b"MMIDIDX\\x00\\x00"   9 bytes, magic
          uint64 version = 1
          uint8  dtype code (8: uint16, 4: int32 - Megatron's choice below/above 65,500 ids)
          uint64 S, the number of sequences
          uint64 D, the number of document indices (documents + 1)
          int32  [S] sequence lengths
          int64  [S] sequence pointers: byte offset of each sequence in the .bin
          int64  [D] document indices: the first sequence of each document, then S

One sequence per document, EOS kept at its end (Megatron's preprocess_data.py
--append-eod), so the document boundaries are packlm's. Train with
`--data-path <out>/train --split 100,0,0`, or give val as `--valid-data-path <out>/val`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from packlm.data.store.token_store import TokenStore

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
CHUNK = 1 << 24  # tokens converted at a time, so memory stays bounded


def megatron_dtype(vocab_size: int) -> np.dtype:
    """Megatron's DType.optimal_dtype: uint16 below 65,500 ids, else int32."""
    return np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)


def write_indexed(store: TokenStore, prefix: Path, vocab_size: int) -> None:
    """`prefix`.bin and `prefix`.idx of one store."""
    dtype = megatron_dtype(vocab_size)
    tokens = store.tokens  # [N] memmap (data.shards: the shards' memmaps, read in chunks)
    with open(prefix.with_suffix(".bin"), "wb") as f:
        for start in range(0, len(tokens), CHUNK):
            f.write(tokens[start : start + CHUNK].astype(dtype).tobytes())
        f.flush()
        os.fsync(f.fileno())
    offsets = np.asarray(store.doc_offsets, dtype=np.int64)  # [n_docs + 1]
    lengths = np.diff(offsets)
    if len(lengths) and lengths.max() >= 2**31:
        raise ValueError(f"{store.path}: a document of {lengths.max()} tokens overflows int32")
    n = len(lengths)
    with open(prefix.with_suffix(".idx"), "wb") as f:
        f.write(MAGIC)
        f.write(np.uint64(VERSION).tobytes())
        f.write(np.uint8(DTYPE_CODES[dtype]).tobytes())
        f.write(np.uint64(n).tobytes())
        f.write(np.uint64(n + 1).tobytes())
        f.write(lengths.astype("<i4").tobytes())
        f.write((offsets[:-1] * dtype.itemsize).astype("<i8").tobytes())
        f.write(np.arange(n + 1, dtype="<i8").tobytes())
        f.flush()
        os.fsync(f.fileno())


def export_megatron(stores: dict[str, TokenStore], tokenizer, out: Path) -> list[str]:
    for split, store in stores.items():
        write_indexed(store, out / split, tokenizer.vocab_size)
    return [
        f"Megatron-LM: --data-path <out>/train; EOS (id {stores['train'].eos_id}) ends every document"
    ]
