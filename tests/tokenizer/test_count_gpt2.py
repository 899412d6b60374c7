"""GPT-2's pre-tokenizer in C (`_count.c`): the counts `regex.findall(GPT2_PATTERN)` gives,
on random strings over every kind of character the pattern tells apart, on the golden texts
and on code, and the class table agrees with `regex` on every code point it samples."""

from __future__ import annotations

from collections import Counter

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from packlm.tokenizer import GPT2_PATTERN
from packlm.tokenizer.pretokenize import special_regex
from packlm.tokenizer.training import counting
from packlm.tokenizer.training.counting import count_gpt2, count_pretokens, regex_classes

pytestmark = pytest.mark.skipif(count_gpt2 is None, reason="packlm's _bpe extension not built")
GPT2 = regex.compile(GPT2_PATTERN)

# what the pattern tells apart: U+0020 and other whitespace (ASCII, Latin-1, Unicode, U+001C,
# which str.isspace calls space), the contraction letters in both cases, letters and digits
# beyond ASCII (Latin-1, 2- and 4-byte code points, a letter newer than Python's Unicode),
# marks, emoji, a lone surrogate, the apostrophe and punctuation
CHARS = list(" \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u3000\u200b'sStTrReEvVmMlLdDaz09!?.,-_\ufeff")
CHARS += ["é", "ß", "ª", "²", "Ж", "中", "٣", "Ⅻ", "\u0345", "😀", "\ud800", "\U000323b0"]


def c_counts(text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    count_gpt2(text, regex_classes(), counts)
    return counts


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(CHARS), max_size=40).map("".join))
def test_c_scanner_counts_what_regex_finds(text):
    assert c_counts(text) == Counter(GPT2.findall(text))


def test_c_scanner_on_golden_texts_and_code(golden_bpe, stdlib_docs):
    texts = [p.read_text(encoding="utf-8") for p in sorted(golden_bpe.glob("*.txt"))]
    texts += [(golden_bpe / "corpus.en").read_text(encoding="utf-8"), *stdlib_docs[:20]]
    for text in texts:
        assert c_counts(text) == Counter(GPT2.findall(text))


def test_counts_add_to_what_the_counter_holds():
    counts = Counter({" world": 5, "other": 1})
    count_gpt2("hello world world", regex_classes(), counts)
    assert counts == Counter({" world": 7, "hello": 1, "other": 1})


def test_class_table_is_regex_on_sampled_code_points():
    table = regex_classes()
    for cp in list(range(0, 0x3000)) + list(range(0x3000, 0x110000, 97)):
        ch = chr(cp)
        want = (
            1 if regex.match(r"\p{L}", ch) else 2 if regex.match(r"\p{N}", ch)
            else 4 if regex.match(r"\s", ch) else 0
        )  # fmt: skip
        assert table[cp] == want, hex(cp)


def test_without_the_c_scanner_regex_counts_the_same_around_special_tokens(monkeypatch):
    texts = ["a<|endoftext|>b's  c", "x 12 y"]
    specials = special_regex(["<|endoftext|>"])
    fast: Counter[str] = Counter()
    count_pretokens(texts, GPT2_PATTERN, specials, into=fast)
    monkeypatch.setattr(counting, "count_gpt2", None)  # an _bpe built before _count.c
    slow: Counter[str] = Counter()
    count_pretokens(texts, GPT2_PATTERN, specials, into=slow)
    assert fast == slow == Counter(["a", "b", "'s", " ", " c", "x", " 12", " y"])
