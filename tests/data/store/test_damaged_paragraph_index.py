"""Issue #59, family 7: the paragraph index of `data.snap=paragraph` is a derived cache: a
copy cut short, emptied, overwritten or holding other numbers is said so (naming the file)
and rebuilt from the store, equal to a fresh one. Before: a truncated index failed every
later run with a traceback and was never rebuilt."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from helpers.stores import prepare, write_corpus
from packlm.data.store.layout import write_npy
from packlm.data.store.paragraphs import token_table


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("paragraphs")
    write_corpus(root / "corpus")
    return prepare(root / "corpus", root / "cache", separator=None)


def _damage(path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) - 5])
    elif how == "header_cut":
        path.write_bytes(data[:40])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(bytes(range(256)) * 4)
    elif how == "float_array":
        with open(path, "wb") as f:
            write_npy(f, np.linspace(0, 1, 7))
    elif how == "out_of_range":
        with open(path, "wb") as f:
            write_npy(f, np.array([5, 10**9], dtype=np.uint32))
    elif how == "unsorted":
        starts = np.load(path)
        with open(path, "wb") as f:
            write_npy(f, starts[::-1].copy())


@pytest.mark.parametrize(
    "how",
    ["truncated", "header_cut", "empty", "garbage", "float_array", "out_of_range", "unsorted"],
)
def test_a_damaged_paragraph_index_is_named_and_rebuilt(prepared, caplog, how):
    store, tok = prepared.open("train"), prepared.tokenizer
    fresh = np.array(store.paragraph_starts(tok))
    assert len(fresh) > 20
    (path,) = store.path.glob("paragraphs-*.npy")
    _damage(path, how)
    caplog.set_level(logging.WARNING)
    again = prepared.open("train").paragraph_starts(tok)
    assert np.array_equal(again, fresh)
    (line,) = [r.getMessage() for r in caplog.records if "paragraph index" in r.getMessage()]
    assert line.startswith(f"{path}: a damaged paragraph index (") and "rebuilt" in line
    assert np.array_equal(np.load(path), fresh)  # the file itself is whole again
    assert not list(store.path.glob(".paragraphs-*"))  # written to a temporary name, renamed
    caplog.clear()
    prepared.open("train").paragraph_starts(tok)  # the rebuilt index is read as it is
    assert not [r for r in caplog.records if "paragraph index" in r.getMessage()]


def test_an_intact_index_is_read_without_a_rebuild(prepared, monkeypatch):
    store, tok = prepared.open("train"), prepared.tokenizer
    store.paragraph_starts(tok)
    from packlm.data.store import paragraphs

    monkeypatch.setattr(paragraphs, "paragraph_starts", lambda *a: pytest.fail("rebuilt"))
    assert len(prepared.open("train").paragraph_starts(token_table(tok))) > 20
