"""Append the hashes of every training batch to a file: a debugging aid for exact resume.

Enabled only when the environment variable `PACKLM_BATCH_HASHES` names a file (or by
passing the callback to `train(..., callbacks=[...])`); normal runs never write it. One line
per batch and rank, appended and flushed at once, so a killed run leaves complete lines:

    <global_step> <batch_idx> <rank> <sha1 of input_ids, 16 hex> <one 12-hex sha1 per row, comma-separated>

Comparing the lines of two runs step by step shows whether they saw the same data; the
per-row hashes show how a global batch was split between ranks.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np

ENV = "PACKLM_BATCH_HASHES"


def batch_hashes(input_ids: Any) -> tuple[str, list[str]]:
    """(hash of the whole [B, T] batch, hash of each row) of int64 token ids."""
    ids = np.ascontiguousarray(
        np.asarray(input_ids.cpu() if hasattr(input_ids, "cpu") else input_ids, dtype=np.int64)
    )
    whole = hashlib.sha1(ids.tobytes()).hexdigest()[:16]
    rows = [hashlib.sha1(row.tobytes()).hexdigest()[:12] for row in ids]
    return whole, rows


class BatchHashes(L.Callback):
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def from_env(cls) -> BatchHashes | None:
        path = os.environ.get(ENV)
        return cls(path) if path else None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        whole, rows = batch_hashes(batch["input_ids"])
        line = f"{trainer.global_step} {batch_idx} {trainer.global_rank} {whole} {','.join(rows)}\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_APPEND: lines of several ranks never interleave inside a line
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def read_batch_hashes(path: str | os.PathLike) -> list[tuple[int, int, int, str, list[str]]]:
    """The lines of a batch-hash file as (step, batch_idx, rank, batch hash, row hashes)."""
    out = []
    for line in Path(path).read_text().splitlines():
        step, idx, rank, whole, rows = line.split(" ")
        out.append((int(step), int(idx), int(rank), whole, rows.split(",")))
    return out
