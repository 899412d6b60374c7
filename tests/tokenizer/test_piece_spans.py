"""`piece_spans`: a long document cut into pieces that pre-tokenize exactly as the whole,
on adversarial text (space runs, no newlines, CJK, symbols, digits), for both built-in
patterns and a custom one; and `split_pretoken`'s exact cuts inside one pre-token."""

from __future__ import annotations

import random

import numpy as np
import pytest
import regex

from packlm.tokenizer.pretokenize import CL100K_PATTERN, GPT2_PATTERN, piece_spans, split_pretoken

CUSTOM = r"""\p{L}+|\p{N}|\s+(?!\S)|\s+|[^\s\p{L}\p{N}]+"""
ALPHABET = ["a", "b", "Z", "é", "你", "好", "。", " ", " ", "  ", "\t", "\n", "\r\n", "'s", "'", "1",
            "23", "-", "=", "(", "🙂", "\u00a0", "Ω", "x=", ".\n"]  # fmt: skip


def adversarial(seed: int, n: int) -> str:
    rng = random.Random(seed)
    parts = []
    while sum(map(len, parts)) < n:
        kind = rng.random()
        if kind < 0.05:  # a long run of one character
            parts.append(rng.choice(["a", " ", "7", "你", "=", "\n", ".\n"]) * rng.randint(50, 400))
        else:
            parts.append(rng.choice(ALPHABET))
    return "".join(parts)


def pretokens_of_pieces(text: str, pattern: str, **kw) -> list[str]:
    compiled = regex.compile(pattern)
    return [t for s, e, _ in piece_spans(text, pattern, **kw) for t in compiled.findall(text[s:e])]


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, CL100K_PATTERN, CUSTOM])
@pytest.mark.parametrize("seed", range(12))
def test_pieces_pretokenize_as_the_whole(pattern, seed):
    text = adversarial(seed, 6000)
    whole = regex.compile(pattern).findall(text)
    assert pretokens_of_pieces(text, pattern, size=64, max_token=10**9) == whole


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, CL100K_PATTERN])
@pytest.mark.parametrize(
    "text",
    [
        " " * 5000 + "x",  # one run of spaces
        "word " * 2000,  # no newline at all
        "你好世界" * 1000,  # CJK without punctuation: one pre-token
        "你好，世界。" * 800,  # CJK with punctuation
        "1234567890" * 500,  # digits (GPT-2: one pre-token; cl100k: groups of three)
        "=" * 3000 + "\n" * 3000 + "a b" * 10,
        ".\n"
        * 3000,  # symbol + newline pre-tokens (cl100k): no safe place, followed token by token
    ],
)
def test_spans_cover_text_and_stay_bounded(pattern, text):
    spans = list(piece_spans(text, pattern, size=256, max_token=512))
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert max(e - s for s, e, _ in spans) <= 2 * 512  # bounded whatever the text
    if all(exact for *_, exact in spans):  # no pre-token was cut: the pre-tokens are the whole's
        assert pretokens_of_pieces(text, pattern, size=256, max_token=512) == regex.compile(
            pattern
        ).findall(text)


def test_short_text_is_one_span():
    assert list(piece_spans("hello world", GPT2_PATTERN)) == [(0, 11, True)]


def test_split_pretoken_exact_only_where_no_token_holds_the_pair():
    text = "你好世界" * 300
    data = text.encode()
    joined = np.zeros(65536, dtype=bool)
    joined[[a * 256 + b for a, b in zip(data, data[1:], strict=False)]] = True  # every pair merged
    joined[data[11] * 256 + data[12]] = False  # ...except at the boundary 界|你
    parts = list(split_pretoken(text, 0, len(text), 100, joined))
    assert "".join(text[s:e] for s, e, _ in parts) == text
    for s, e, exact in parts[:-1]:
        assert e - s <= 100
        assert exact == (text[e - 1 : e + 1] == "界你")
    assert all(exact for *_, exact in parts)  # a free boundary every 4 characters
    none_free = list(split_pretoken(" " * 1000, 0, 1000, 100, np.ones(65536, dtype=bool)))
    assert [e - s for s, e, _ in none_free] == [100] * 10
    assert [x for *_, x in none_free] == [False] * 9 + [True]
