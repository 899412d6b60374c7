"""Properties over arbitrary Unicode: decode(encode(s)) == s, the engines agree, and
streaming equals encoding the whole text."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packlm.tokenizer import Tokenizer
from packlm.tokenizer import tokenizer as tokenizer_module

# text mixed with special tokens, their fragments and near misses
LOOKALIKES = [
    "<|endoftext|>",
    "<|pad|>",
    "<|endoftext",
    "endoftext|>",
    "<|",
    "|>",
    "<|pad",
    "<|endoftext|",
    "<<|pad|>>",
    "<|ENDOFTEXT|>",
    " ",
    "\n",
    "'s",
    "123",
]
texts = st.lists(st.one_of(st.text(), st.sampled_from(LOOKALIKES)), max_size=12).map("".join)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))


def roundtrip(tok: Tokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text
    ordinary = tok.encode_ordinary(text)
    assert tok.decode(ordinary) == text
    assert not set(ordinary) & set(tok.special_token_ids.values())


@FAST
@given(texts)
def test_roundtrip(small_tokenizer, text):
    roundtrip(small_tokenizer, text)


@pytest.mark.slow
@SLOW
@given(texts)
def test_roundtrip_many(small_tokenizer, text):
    roundtrip(small_tokenizer, text)


@pytest.fixture(scope="module")
def engines(small_vocab):
    pytest.importorskip("tiktoken")
    vocab, merges = small_vocab
    specials = ["<|endoftext|>", "<|pad|>"]
    return (
        Tokenizer(vocab, merges, specials, engine="tiktoken"),
        Tokenizer(vocab, merges, specials, engine="python"),
    )


@FAST
@given(texts)
def test_engines_agree(engines, text):
    fast, pure = engines
    assert fast.encode(text) == pure.encode(text)


@FAST
@given(texts, st.lists(st.integers(1, 20), min_size=1, max_size=5))
def test_streaming_equals_whole(small_tokenizer, text, sizes):
    pieces, pos, k = [], 0, 0
    while pos < len(text):
        pieces.append(text[pos : pos + sizes[k % len(sizes)]])
        pos, k = pos + sizes[k % len(sizes)], k + 1
    with mock.patch.object(tokenizer_module, "STREAM_CHARS", 8):  # look for a cut often
        streamed = list(small_tokenizer.encode_iterable(pieces))
    assert streamed == small_tokenizer.encode(text)


@FAST
@given(st.lists(st.integers(0, 999), max_size=50))
def test_decode_never_raises_on_valid_ids(small_tokenizer, ids):
    assert isinstance(small_tokenizer.decode(ids), str)
