"""`train.keep_freed_memory`: a training step re-allocates the memory it freed, so keep it.

Every step allocates and frees the same activations again. glibc's malloc hands blocks of
128 KiB and up to fresh `mmap`s at first and then, once such a block is freed, raises that
threshold to the block's size and gives the top of the heap back to the OS whenever more
than twice that is free there. The step's activations, logits and gradients (0.4-12 MB each
at the presets' shapes) fall right on those edges: every step returned its memory to the
OS and took it back page by page, 2,800 minor page faults a step at nanoGPT's CPU shape and
11,600 at the Shakespeare preset's (bench/presets.md: 10-15% of its step, in system time).
Fixing both thresholds keeps freed memory in the process for the next step (peak RSS is
unchanged: it is the same memory, kept instead of returned). PyTorch's CPU tuning guide
reaches the same end by preloading jemalloc or tcmalloc; this needs no other library.

Off by default: `mallopt` changes every allocation of the whole process (a notebook's, a test
run's), not only training's. The same thresholds from the shell, for any process, without
the key: `MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 python train.py`
(glibc's manual, "Malloc Tunable Parameters"; since glibc 2.26 also
`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

M_TRIM_THRESHOLD = -1
"""mallopt's parameter: free memory at the top of the heap above this goes back to the OS."""
M_MMAP_THRESHOLD = -3
"""mallopt's parameter: blocks of this size and up are separate mmaps (setting it turns
glibc's dynamic threshold off)."""
MMAP_THRESHOLD = 32 << 20
"""Blocks up to 32 MiB come from the heap: glibc's own ceiling for its dynamic threshold."""
TRIM_THRESHOLD = 1 << 30
"""Give free memory back only past 1 GiB at the heap's top (an evaluation after training,
say), not after every step."""


def is_glibc() -> bool:
    """Whether this process's C library is glibc (macOS, musl and Windows have their own
    allocators, with nothing of this to set)."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's thresholds so freed blocks stay in the process; once per process. Returns
    whether they were set: False where the C library is not glibc."""
    if not is_glibc():
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
