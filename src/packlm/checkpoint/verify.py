"""A damaged checkpoint is refused before anything uses it: every zip entry against its CRC32,
every floating weight finite.

torch.save writes a zip archive whose directory records each entry's CRC32, but torch.load
(mmap or not) never compares them: a checkpoint with one flipped bit loaded silently in
evaluate, generate, export and `ckpt_path=`, and the loss came out different. And a checkpoint
of NaN weights was evaluated (`"loss": NaN`, exit 0), generated from and exported.
`read_checkpoint` (packlm.checkpoint.contents), which every loader goes through, calls both.

The CRCs are computed on the file's memory map (no copy), the entries spread over threads
(zlib releases the GIL); bench/checkpoint_verify.py measures the cost against the load.
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from packlm.errors import ConfigError

LOCAL_HEADER = struct.Struct("<4s22sHH")  # signature, 22 bytes, name length, extra length


def _entry_crc(view: memoryview, info: zipfile.ZipInfo) -> int:
    """The CRC32 of a stored entry's bytes, read in place from the mapped file."""
    start = info.header_offset
    signature, _, name_len, extra_len = LOCAL_HEADER.unpack_from(view, start)
    if signature != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header for {info.filename}")
    begin = start + LOCAL_HEADER.size + name_len + extra_len
    end = begin + info.compress_size
    if end > len(view):
        raise zipfile.BadZipFile(f"{info.filename} runs past the end of the file")
    return zlib.crc32(view[begin:end])


def check_entries(path: Path, key: str = "ckpt_path") -> None:
    """ConfigError naming the file and the first entry whose bytes do not match their CRC32."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            compressed = [i for i in infos if i.compress_type != zipfile.ZIP_STORED]
            bad = archive.testzip() if compressed else _stored_mismatch(path, infos)
    except (zipfile.BadZipFile, OSError, struct.error) as e:
        raise ConfigError(f"{key}={path}: damaged checkpoint ({e})") from None
    if bad is not None:
        raise ConfigError(
            f"{key}={path}: damaged checkpoint: zip entry {bad!r} does not match its CRC32 (the "
            "file changed after it was written: a bad disk or copy); use another checkpoint"
        )


def _stored_mismatch(path: Path, infos: list[zipfile.ZipInfo]) -> str | None:
    """The name of the first entry whose CRC32 differs (torch stores entries uncompressed)."""
    if os.path.getsize(path) == 0:
        return None
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            workers = min(8, os.cpu_count() or 1, max(1, len(infos)))
            with ThreadPoolExecutor(workers) as pool:
                crcs = list(pool.map(lambda info: _entry_crc(view, info), infos))
        finally:
            view.release()
    return next((i.filename for i, crc in zip(infos, crcs, strict=True) if crc != i.CRC), None)


def check_finite(checkpoint: dict[str, Any], path: Path, key: str = "ckpt_path") -> None:
    """ConfigError naming the first weight with a NaN or an infinity."""
    for name, tensor in (checkpoint.get("state_dict") or {}).items():
        if not (isinstance(tensor, torch.Tensor) and tensor.is_floating_point()):
            continue
        # the sum first: one read, ~10x faster than isfinite().all(); a NaN or an infinity
        # makes it non-finite, and an overflow of finite values is told apart exactly
        if _finite_sum(tensor) or bool(torch.isfinite(tensor).all()):
            continue
        nan = bool(torch.isnan(tensor).any())
        raise ConfigError(
            f"{key}={path}: the weight {name} holds {'NaN' if nan else 'infinite'} values; "
            "a model with non-finite weights computes nothing meaningful (use an earlier "
            "checkpoint)"
        )


def _finite_sum(tensor: torch.Tensor) -> bool:
    accumulate = torch.float64 if tensor.dtype == torch.float64 else torch.float32
    return bool(torch.isfinite(tensor.sum(dtype=accumulate)))
