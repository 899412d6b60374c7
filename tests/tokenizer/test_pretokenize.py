"""Pre-tokenization: special tokens split first (longest wins), and `stream_cut` finds
places where cutting the text leaves every pre-token unchanged whatever follows."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from packlm.tokenizer import pretokenize
from packlm.tokenizer.pretokenize import (
    PATTERNS,
    resolve_pattern,
    special_regex,
    split_special,
    stream_cut,
)

SPECIALS = ["<|endoftext|>", "<|end|>", "x y"]  # overlapping, and one with a letter cut inside
SPECIALS_RE = special_regex(SPECIALS)
LONGEST = max(map(len, SPECIALS))
ALPHABET = st.sampled_from(
    [
        "a",
        "Z",
        "é",
        "数",
        "x",
        "y",
        "1",
        "23",
        " ",
        "  ",
        "\n",
        "\r\n",
        "\t",
        "'",
        "'s",
        "'S",
        ".",
        "(",
        "_",
        "\u0301",
        "🙂",
        "<|",
        "|>",
        "end",
        "<|end|>",
        "<|endoftext|>",
        "x y",
    ]
)
texts = st.lists(ALPHABET, max_size=40).map("".join)


def pieces(text: str, pattern: regex.Pattern) -> list[str]:
    out = []
    for piece, is_special in split_special(text, SPECIALS_RE):
        out += [piece] if is_special else pattern.findall(piece)
    return out


@pytest.mark.parametrize("name", ["gpt2", "cl100k"])
@settings(max_examples=400, deadline=None)
@given(head=texts, tail=texts)
def test_stream_cut_changes_no_pretoken(name, head, tail):
    pattern = regex.compile(PATTERNS[name])
    cut = stream_cut(head, SPECIALS_RE, LONGEST)
    assert 0 <= cut <= len(head)
    if cut:
        whole = pieces(head + tail, pattern)
        assert pieces(head[:cut], pattern) + pieces(head[cut:] + tail, pattern) == whole


def test_stream_cut_avoids_special_tokens():
    text = "word<|endoftext|>" + "?" * LONGEST
    cut = stream_cut(text, SPECIALS_RE, LONGEST)
    assert cut == len("word")  # not after the "t" inside the special token
    assert stream_cut("ab x y" + "." * LONGEST, SPECIALS_RE, LONGEST) == 6  # not 4, inside
    assert stream_cut("1234 .,", None, 0) == 0  # no letter: no safe place


def test_split_special_longest_first():
    text = "a<|endoftext|><|end|>b<|end"
    assert list(split_special(text, SPECIALS_RE)) == [
        ("a", False),
        ("<|endoftext|>", True),
        ("<|end|>", True),
        ("b<|end", False),
    ]
    assert list(split_special("", SPECIALS_RE)) == []
    assert list(split_special("abc", None)) == [("abc", False)]


def test_resolve_pattern():
    assert resolve_pattern("gpt2") == PATTERNS["gpt2"]
    for name, built_in in PATTERNS.items():  # taken unchecked at a load: they pass the checks
        assert pretokenize._checked(name, built_in) == built_in == resolve_pattern(built_in)
    assert resolve_pattern(r"\w+|\s+|[^\w\s]+") == r"\w+|\s+|[^\w\s]+"
    for bad in ("", "(", None):
        with pytest.raises(ValueError, match="pattern"):
            resolve_pattern(bad)


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("x*", "matches the empty string"),
        (r"\p{L}+", "leaves characters unmatched"),
        (r"\w+", "unmatched"),
    ],
)
def test_a_pattern_that_would_drop_text_is_refused_naming_tokenizer_pattern(pattern, message):
    from packlm.config.tokenizer import TokenizerConfig
    from packlm.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"^tokenizer\.pattern=.*{message}"):
        TokenizerConfig(pattern=pattern).validate()


def test_a_covering_custom_pattern_round_trips_every_character():
    from packlm.tokenizer import Tokenizer, train_bpe_from_iterator
    from packlm.tokenizer.pretokenize import COVERAGE_SAMPLE

    text = "Copyright (c) 2024 Google Inc.\n" + COVERAGE_SAMPLE
    pattern = r"\p{L}+|[\s\S]"
    vocab, merges = train_bpe_from_iterator([text * 5], 300, ["<|endoftext|>"], pattern=pattern)
    tok = Tokenizer(vocab, merges, ["<|endoftext|>"], pattern)
    assert tok.decode(tok.encode(text)) == text
