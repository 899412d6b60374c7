"""A tiny pseudo-English corpus on disk, shared by the application and reliability tests."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = "the of and to a in that is was he for it with as his on be at by had not are but from"


def write_tiny_corpus(root: Path, n: int = 60, seed: int = 0) -> Path:
    """n small documents of 5 to 120 words, one file each, reproducible from `seed`."""
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words = WORDS.split()
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(5, 120)))
        (root / f"doc{i:03d}.txt").write_text(text + ".\n", encoding="utf-8")
    return root
