"""Pre-tokenization: split text at special tokens, then into regex pre-tokens.

BPE merges never cross a pre-token or a special token, so both training and encoding
start here. Special tokens are matched longest first, so an overlapping shorter token
never wins over the longer one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np
import regex

from packlm.tokenizer.formats import excerpt

# GPT-2's pattern, exactly as in its encoder.py.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# cl100k_base (GPT-3.5/4), as tiktoken writes it.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
PATTERNS = {"gpt2": GPT2_PATTERN, "cl100k": CL100K_PATTERN}
_BUILT_IN = frozenset(PATTERNS.values())

# In the built-in patterns no pre-token holds a letter followed by a non-letter, so a
# pre-token always ends there and the next starts right after: a place where text can be
# cut without changing the pre-tokens on either side. (Custom patterns must keep this.)
_CUT = regex.compile(r"(?r)\p{L}(?=\P{L})")

PIECE_CHARS = 1 << 18
"""A document longer than this is pre-tokenized and encoded in pieces of about this length."""
MAX_PRETOKEN_CHARS = 1 << 16
"""A single pre-token longer than this is encoded (or counted) in parts of at most this length."""

# Where both built-in patterns always end a pre-token, whatever the text around: after a letter
# not followed by a letter, a digit not followed by a digit, or a symbol followed by a digit or
# by a space or tab (not CR/LF: cl100k keeps newlines after a symbol). The pre-token holding the
# character before the cut cannot take the one after, the character before is no whitespace (so
# no lookahead of an earlier pre-token, `\s+(?!\S)` or `\s++$`, reads past the cut), and neither
# pattern looks behind: both sides pre-tokenize alone as in the whole.
_SAFE = r"\p{L}(?=\P{L})|\p{N}(?=\P{N})|[^\s\p{L}\p{N}](?=\p{N}|[^\S\r\n])"
_LAST_SAFE = regex.compile("(?r)" + _SAFE)


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
        raise ValueError(f"pattern={excerpt(pattern)}: expected 'gpt2', 'cl100k' or a regex string")
    resolved = PATTERNS.get(pattern, pattern)
    if resolved in _BUILT_IN:  # passes the checks below (tested): no compile at every load
        return resolved
    return _checked(pattern, resolved)


def _checked(pattern: str, resolved: str) -> str:
    try:
        compiled = regex.compile(resolved)
    except regex.error as e:
        raise ValueError(f"pattern={excerpt(pattern)}: not a valid regex ({e})") from None
    if compiled.match("") is not None:
        raise ValueError(
            f"pattern={excerpt(pattern)}: matches the empty string; every pre-token needs a character"
        )
    covered = "".join(compiled.findall(COVERAGE_SAMPLE))
    if covered != COVERAGE_SAMPLE:
        missing = sorted(set(COVERAGE_SAMPLE) - set(covered))[:8]
        raise ValueError(
            f"pattern={excerpt(pattern)}: leaves characters unmatched, e.g. {missing}, whose text would "
            "be dropped; append |[\\s\\S] to keep each as a pre-token of its own"
        )
    return resolved


def check_special_tokens(special_tokens: Iterable[str] | None) -> list[str]:
    """Validate special tokens: strings, non-empty, no duplicates."""
    tokens = list(special_tokens or [])
    for s in tokens:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special_tokens: {excerpt(s)} is not a non-empty string")
    dupes = sorted({s for s in tokens if tokens.count(s) > 1})
    if dupes:
        raise ValueError(f"special_tokens={excerpt(tokens)}: duplicates {excerpt(dupes)}")
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


def piece_spans(
    text: str, pattern: str, size: int = PIECE_CHARS, max_token: int = MAX_PRETOKEN_CHARS,
    split_token=None,
) -> Iterator[tuple[int, int, bool]]:  # fmt: skip
    """(start, end, exact) spans covering `text` in order, each about `size` characters or
    less, whose pre-tokens (and so their BPE ids) are those of the whole text.

    Spans are cut at `_SAFE` places for the built-in patterns; for a custom pattern such a
    place is taken only after pre-tokenizing around it both ways gives the same pre-tokens.
    A stretch with no such place (a run of spaces, of letters without punctuation) is
    followed pre-token by pre-token (`finditer` over the whole text); a pre-token longer
    than `max_token` is cut by `split_token(text, start, end, max_token)` (default
    `split_pretoken`), where `exact=False` marks a part whose BPE may differ from the whole
    pre-token's.
    """
    builtin = pattern in PATTERNS.values()
    compiled = regex.compile(pattern)
    start, n = 0, len(text)
    while n - start > size:
        cut = _safe_cut(text, start, start + size, compiled, builtin)
        if cut:
            yield start, cut, True
            start = cut
        else:  # no safe place: follow the pre-tokens for about `size` characters
            start = yield from _token_spans(text, start, compiled, size, max_token, split_token)
    if start < n:
        yield start, n, True


def _safe_cut(text: str, start: int, limit: int, compiled, builtin: bool, tries: int = 3) -> int:
    """The last safe place in (start, limit], 0 if none; for a custom pattern, checked."""
    for _ in range(tries):
        m = _LAST_SAFE.search(text, start, limit + 1)
        if m is None:
            return 0
        cut = m.end()
        if builtin or _same_pretokens(text, start, cut, compiled):
            return cut
        limit = m.start()
    return 0


def _same_pretokens(text: str, start: int, cut: int, compiled, margin: int = 4096) -> bool:
    """Do text[start:cut] and text[cut:] pre-tokenize as their join (to `margin` past the cut)?"""
    end = min(len(text), cut + margin)
    joined = compiled.findall(text[start:end])
    return joined == compiled.findall(text[start:cut]) + compiled.findall(text[cut:end])


def _token_spans(text, start, compiled, size, max_token, split_token):
    """Spans of whole pre-tokens from `start` (found in the whole text: exact) until about
    `size` characters or one over-long pre-token are done; returns where they end."""
    split_token = split_token or split_pretoken
    group: list[tuple[int, int]] = []  # pre-tokens not yielded yet
    for m in compiled.finditer(text, start):
        s, e = m.span()
        if e - s > max_token:
            yield from _group(text, start, s, group, compiled)
            for ps, pe, exact in split_token(text, s, e, max_token):  # each part one pre-token
                yield ps, pe, exact and compiled.fullmatch(text, ps, pe) is not None
            return e
        group.append((s, e))
        if e - start >= size:
            yield from _group(text, start, e, group, compiled)
            return e
    yield from _group(text, start, len(text), group, compiled)
    return len(text)


def _group(text: str, start: int, end: int, tokens: list[tuple[int, int]], compiled):
    """text[start:end] as one span if it pre-tokenizes alone into `tokens` (its pre-tokens in
    the whole text), else one span per pre-token."""
    if start >= end:
        return
    if not tokens or compiled.findall(text[start:end]) == [text[s:e] for s, e in tokens]:
        yield start, end, True
        return
    for k, (_, e) in enumerate(tokens):
        yield start, end if k == len(tokens) - 1 else e, True
        start = e


def split_pretoken(
    text: str, start: int, end: int, max_token: int, joined_pairs=None
) -> Iterator[tuple[int, int, bool]]:
    """Parts of at most `max_token` characters of the one pre-token text[start:end].

    Byte-level BPE of a pre-token equals the BPE of two parts when no merge can join bytes
    across the cut, i.e. when no token of the vocabulary holds the two bytes on either side
    of it. `joined_pairs` (a bool array over byte pairs a*256+b, from the vocabulary) finds
    such places (exact=True); where there is none within `max_token` characters, or without
    a vocabulary (training), the part is cut at `max_token` characters (exact=False: the ids
    at that cut may differ from the whole pre-token's, the bytes never do). `exact` is about
    the cut that ends a span.
    """
    while end - start > max_token:
        limit = start + max_token
        cut = 0 if joined_pairs is None else _last_unjoined(text, start, limit, joined_pairs)
        yield start, cut or limit, bool(cut)
        start = cut or limit
    yield start, end, True


def _char_pairs(part: str):
    """(pair codes at each character start after the first, their character index)."""
    data = np.frombuffer(part.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    starts = np.flatnonzero((data & 0xC0) != 0x80)[1:]  # byte offsets of characters 1..n-1
    codes = data[starts - 1].astype(np.int64) * 256 + data[starts]
    return codes, np.arange(1, len(starts) + 1)


def _last_unjoined(text: str, start: int, limit: int, joined_pairs) -> int:
    """The last character boundary in (start, limit] no merge can cross, 0 if none."""
    codes, index = _char_pairs(text[start : limit + 1])
    free = index[~joined_pairs[codes]]
    free = free[free <= limit - start]
    return start + int(free[-1]) if len(free) else 0
