"""Pre-tokenization: split text at special tokens, then into regex pre-tokens.

BPE merges never cross a pre-token or a special token, so both training and encoding
start here. Special tokens are matched longest first, so an overlapping shorter token
never wins over the longer one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import regex

# GPT-2's pattern, exactly as in its encoder.py.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# cl100k_base (GPT-3.5/4), as tiktoken writes it.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
PATTERNS = {"gpt2": GPT2_PATTERN, "cl100k": CL100K_PATTERN}

# In the built-in patterns no pre-token holds a letter followed by a non-letter, so a
# pre-token always ends there and the next starts right after: a place where text can be
# cut without changing the pre-tokens on either side. (Custom patterns must keep this.)
_CUT = regex.compile(r"(?r)\p{L}(?=\P{L})")


COVERAGE_SAMPLE = (
    "Hello, World! it's 42 -- don't\tstop\n\n  x=(a+b)*c; {k: v} [1] <|> ~`@#$%^&_\\ "
    "déjà vu Ωμέγα Привет 你好世界 こんにちは 안녕 مرحبا שלום नमस्ते 🙂👍🏽 e\u0301 \u00a0\u2003\r\n"
)
"""Characters of every common kind: a pre-tokenization pattern must match each of them."""


def resolve_pattern(pattern: str) -> str:
    r"""A pattern name ("gpt2", "cl100k") or a regex string -> the regex string.

    Refused: a pattern that matches the empty string (it would split nothing), and one that
    leaves characters of `COVERAGE_SAMPLE` unmatched (their text would be dropped silently;
    append `|[\s\S]` to keep each as a pre-token of its own).
    """
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"pattern={pattern!r}: expected 'gpt2', 'cl100k' or a regex string")
    resolved = PATTERNS.get(pattern, pattern)
    try:
        compiled = regex.compile(resolved)
    except regex.error as e:
        raise ValueError(f"pattern={pattern!r}: not a valid regex ({e})") from None
    if compiled.match("") is not None:
        raise ValueError(
            f"pattern={pattern!r}: matches the empty string; every pre-token needs a character"
        )
    covered = "".join(compiled.findall(COVERAGE_SAMPLE))
    if covered != COVERAGE_SAMPLE:
        missing = sorted(set(COVERAGE_SAMPLE) - set(covered))[:8]
        raise ValueError(
            f"pattern={pattern!r}: leaves characters unmatched, e.g. {missing}, whose text would "
            "be dropped; append |[\\s\\S] to keep each as a pre-token of its own"
        )
    return resolved


def check_special_tokens(special_tokens: Iterable[str] | None) -> list[str]:
    """Validate special tokens: strings, non-empty, no duplicates."""
    tokens = list(special_tokens or [])
    for s in tokens:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special_tokens: {s!r} is not a non-empty string")
    dupes = sorted({s for s in tokens if tokens.count(s) > 1})
    if dupes:
        raise ValueError(f"special_tokens={tokens}: duplicates {dupes}")
    return tokens


def special_regex(special_tokens: Iterable[str]) -> regex.Pattern | None:
    """One alternation of the special tokens, longest first (so overlaps match the longest)."""
    tokens = sorted(special_tokens, key=len, reverse=True)
    if not tokens:
        return None
    return regex.compile("|".join(regex.escape(s) for s in tokens))


def split_special(text: str, specials: regex.Pattern | None) -> Iterator[tuple[str, bool]]:
    """Yield (piece, is_special) in order; ordinary pieces are never empty."""
    if specials is None:
        if text:
            yield text, False
        return
    start = 0
    for m in specials.finditer(text):
        if m.start() > start:
            yield text[start : m.start()], False
        yield m.group(), True
        start = m.end()
    if start < len(text):
        yield text[start:], False


def stream_cut(text: str, specials: regex.Pattern | None, max_special_len: int) -> int:
    """A position where `text` can be cut so that pre-tokenizing the two parts separately
    gives the same pieces as the whole, whatever text is appended later; 0 if none.

    The cut is between a letter and a non-letter, never inside (or before a possibly
    unfinished) special token.
    """
    limit = len(text) - max(max_special_len - 1, 0)  # an unfinished special starts after this
    while limit > 0:
        m = _CUT.search(text, 0, limit)
        if m is None:
            return 0
        cut = m.end()
        if specials is None or not any(
            s.start() < cut < s.end()
            for s in specials.finditer(text, max(cut - max_special_len, 0), cut + max_special_len)
        ):
            return cut
        limit = m.start()
    return 0


def count_pretokens(
    texts: Iterable[str], pattern: regex.Pattern, specials, into: Counter[str] | None = None
) -> Counter[str]:
    """Pre-token -> occurrences over `texts` (documents; no pre-token crosses two)."""
    counts: Counter[str] = Counter() if into is None else into
    for text in texts:
        for piece, is_special in split_special(text, specials):
            if not is_special:
                counts.update(pattern.findall(piece))
    return counts
