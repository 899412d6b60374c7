"""{path, span: [a, b]}: nanoGPT's 90/10 split of one file, no byte shared or lost."""

from __future__ import annotations

import gzip
import random

import pytest

from packlm.config.data import DataConfig
from packlm.data.store.sources import (
    ReadCounts,
    ReadOptions,
    SourceError,
    iter_documents,
    resolve_sources,
)
from packlm.errors import ConfigError


def read(entry, **options):
    docs = iter_documents(resolve_sources([entry]), ReadOptions(**options), ReadCounts())
    return [d.text for d in docs]


def test_ascii_span_is_nanogpts_cut(tmp_path):
    text = "".join(random.Random(0).choice("abc \n") for _ in range(1001))
    path = tmp_path / "input.txt"
    path.write_text(text)
    n = len(text)
    (train,) = read({"path": str(path), "span": [0, 0.9]})
    (val,) = read({"path": str(path), "span": [0.9, 1]})
    assert train == text[: int(n * 0.9)]
    assert val == text[int(n * 0.9) :]


@pytest.mark.parametrize("cuts", [[0.1, 0.5], [0.33, 0.34, 0.77], [0.001, 0.999]])
def test_spans_of_multibyte_text_tile_the_file(tmp_path, cuts):
    rng = random.Random(len(cuts))
    text = "".join(rng.choice(["a", "é", "€", "😀", "\n", " "]) for _ in range(500))
    path = tmp_path / "u.txt"
    path.write_bytes(text.encode())
    bounds = [0, *cuts, 1]
    pieces = [
        read({"path": str(path), "span": [a, b]}) for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    assert "".join(p[0] if p else "" for p in pieces) == text  # valid UTF-8, nothing lost


def test_span_splits_on_the_separator_inside_the_span(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("one\n\ntwo\n\nthree\n\nfour")
    half = len("one\n\ntwo\n\n") / path.stat().st_size
    assert read({"path": str(path), "span": [0, half]}, separator="\n\n") == ["one", "two"]
    assert read({"path": str(path), "span": [half, 1]}, separator="\n\n") == ["three", "four"]


def test_span_of_a_compressed_file_is_refused(tmp_path):
    path = tmp_path / "x.txt.gz"
    path.write_bytes(gzip.compress(b"hello world"))
    with pytest.raises(
        SourceError, match=r"x\.txt\.gz: span=\[0\.0, 0\.5\].*uncompressed text.*gzip"
    ):
        read({"path": str(path), "span": [0, 0.5]})


def test_spans_of_one_file_are_different_sources(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("abcdef")
    (one,) = resolve_sources([{"path": str(path), "span": [0, 0.5]}])
    (two,) = resolve_sources([{"path": str(path)}])  # in one list they would overlap: refused
    assert one.fingerprint() != two.fingerprint()  # the store cache tells them apart


@pytest.mark.parametrize("span", [[0.5, 0.5], [0.9, 0.1], [0, 1.5], [0.2], "0:0.9", [True, 1]])
def test_bad_span_names_the_key(span):
    with pytest.raises(ConfigError, match=r"data\.sources\[0\]\.span"):
        DataConfig(sources=[{"path": "x.txt", "span": span}]).validate()
