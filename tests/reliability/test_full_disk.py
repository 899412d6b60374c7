"""A really full disk (a small tmpfs; skipped where mounting one is not allowed): one clear
"disk full" error naming the path, no temporary left, the previous file kept.

Simulated ENOSPC (monkeypatched writes) is tested in test_caches.py and test_kill_resume.py.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.stores import prepare_tiny
from packlm.callbacks.checkpointing import AtomicCheckpointIO


@pytest.fixture
def disk(tmp_path):
    """A 1 MiB tmpfs mounted at tmp_path/disk."""
    root = tmp_path / "disk"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()})")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def free(root: Path) -> int:
    return shutil.disk_usage(root).free


def fill(root: Path, leave: int) -> Path:
    """A filler file leaving about `leave` bytes free."""
    filler = root / "filler"
    with open(filler, "wb") as f:
        f.write(bytes(max(0, free(root) - leave)))
    return filler


def test_a_checkpoint_on_a_full_disk_keeps_the_previous_one_and_leaves_no_temporary(disk):
    io = AtomicCheckpointIO()
    path = disk / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"w": torch.arange(50_000.0)}, path)  # 200 kB
    before = free(disk)
    with pytest.raises(OSError) as e:
        io.save_checkpoint({"w": torch.zeros(300_000)}, path)  # 1.2 MB: does not fit
    assert e.value.errno == errno.ENOSPC
    message = str(e.value)
    assert f"cannot write checkpoint {path}: No space left on device (disk full" in message
    assert "the previous last.ckpt (if any) is unchanged" in message
    assert "enforce fail" not in message  # torch's RuntimeError is not what the user sees
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(50_000.0))
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]
    assert free(disk) == before  # the temporary's space is given back


def test_a_store_build_on_a_full_disk_says_so_and_leaves_nothing(disk, tiny_corpus, tmp_path):
    cache = disk / "cache"
    clean = prepare_tiny(tiny_corpus, cache)
    prepare_tiny(tiny_corpus, cache)  # loads the cached tokenizer once: its id tables are kept
    train_tokens = np.array(clean.open("train").tokens)
    shutil.rmtree(cache / "stores")  # the tokenizer stays cached; the store must be rebuilt
    filler = fill(disk, leave=8 << 10)
    before = free(disk)
    with pytest.raises(OSError) as e:
        prepare_tiny(tiny_corpus, cache)
    assert e.value.errno == errno.ENOSPC
    assert "cannot write the token store" in str(e.value)
    assert str(cache / "stores") in str(e.value) and "(disk full" in str(e.value)
    left = [p.name for p in (cache / "stores").iterdir() if not p.name.endswith(".lock")]
    assert left == []
    assert free(disk) >= before - (4 << 10)  # only the lock file's page may remain
    os.unlink(filler)
    again = prepare_tiny(tiny_corpus, cache)
    assert np.array_equal(np.array(again.open("train").tokens), train_tokens)


def test_a_lock_on_a_full_disk_names_the_lock_file(disk, tmp_path):
    """The owner record of a lock cannot be written: the error names the lock and the cause."""
    from packlm.cache.lock import locked

    dest = disk / "entry"
    filler = fill(disk, leave=0)
    with pytest.raises(OSError) as e, locked(dest):
        pass
    assert e.value.errno == errno.ENOSPC
    assert f"cannot write the lock file {disk / '.entry.lock'}" in str(e.value)
    assert "(disk full" in str(e.value)
    filler.unlink()
