"""Cache entries shared by the tokenizer and the token stores.

1. `fingerprint.py`: a fingerprint (the JSON-able dict of everything an artifact was built
   from) -> its `digest`, the entry's directory name; `describe_change` says why an entry
   is rebuilt ("tokenizer.vocab_size: 4096 -> 512").
2. `lock.py`: one process at a time builds an entry (an flock with its owner's record; a
   dead owner's lock is broken).
3. `entry.py`: an entry is a directory that appears whole or not at all: built in a hidden
   temporary sibling under the lock, then renamed into place; `mark_used` dates a hit.
4. `hold.py`: `hold` records that a live run reads an entry, so it is not removed under the run.
The inventory of a cache directory and `python -m packlm.cache` are a command:
`packlm.commands.cache` and `cache_inventory`. Nothing here knows what an entry holds.
"""

from packlm.cache.entry import mark_used, replace_dir, temporary_sibling
from packlm.cache.fingerprint import describe_change, digest, latest
from packlm.cache.lock import locked

DEFAULT_CACHE_DIR = ".cache/packlm"
"""Where tokenizers and stores are cached unless `cache_dir` (or $PACKLM_CACHE) says otherwise."""

__all__ = [
    "DEFAULT_CACHE_DIR", "describe_change", "digest", "latest", "locked", "mark_used", "replace_dir",
    "temporary_sibling",
]  # fmt: skip
