"""Shared fixtures: the optional ../shared data directory next to the project, the tiny corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.corpus import write_tiny_corpus

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ../shared folder (golden files, tinyshakespeare); tests using it skip without it."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent (clone-only checkout)")
    return SHARED


@pytest.fixture(scope="session")
def golden_bpe(shared_dir: Path) -> Path:
    path = shared_dir / "golden" / "bpe"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """Sixty small documents of pseudo-English, one file each."""
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"))
