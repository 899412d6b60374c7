"""The pattern another regex engine needs to pre-tokenize as the `regex` module does.

All engines read the same pattern, but each classifies characters by its own copy of the
Unicode tables: `regex` follows the newest Unicode version, tiktoken's Rust regex and
Hugging Face tokenizers' Oniguruma older ones. A letter added since (U+0C5C, CJK
Extension J at U+323B0, ...) is `\\p{L}` to one and not to the other, so the engines
split such text differently and give other ids.

1. Find the character classes in the pattern (`\\p{..}`, `\\P{..}`, `\\s`, `\\d`, `\\w` and
   their negations).
2. Match each against every Unicode scalar value in both engines (tiktoken: about 0.03 s;
   tokenizers: about 1 s); the members of each, in code point order, are compared as strings.
3. Rewrite each class whose members differ as a set expression, with the difference added
   and taken away: `\\p{L}` -> `[\\p{L}\\x{88F}...&&[^...]]` (both engines read it).
4. Match the rewritten classes again: the rewritten pattern is used only when every class
   now has exactly `regex`'s members.

The probes take about 0.1 s a process (tokenizers: a few seconds), so each result is kept in
`~/.cache/packlm/engine_patterns/` (`$XDG_CACHE_HOME` respected), one small JSON file per
pattern, engine and installed versions of `regex` and the engine, whose Unicode tables are
compiled into them; a file that does not name exactly these is recomputed. `original` undoes
the rewrite, for a pattern read back from an exported file.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import json
import os
from pathlib import Path

import numpy as np
import regex

from packlm.tokenizer.formats import write_atomic

# A class escape, or an escaped backslash (skipped, so `\\p` stays a literal backslash + p)
_ATOM = regex.compile(r"\\\\|\\([pP])(\{[^}]*\}|[A-Za-z])|\\([sSdDwW])")
_BYTES = {bytes([b]): b for b in range(256)}
_RANGES = r"(?:\\x\{[0-9A-F]+\}(?:-\\x\{[0-9A-F]+\})?)"
_CLASS = r"\\p(?:\{[^}]*\}|[A-Za-z])|\\[sdw]"
_FIXED = rf"\[(?P<cls>{_CLASS})(?:{_RANGES}+(?:&&\[\^{_RANGES}+\])?|&&\[\^{_RANGES}+\])\]"
_REWRITTEN = regex.compile(rf"\\\\|(?P<neg>\[\^)?{_FIXED}(?(neg)\])")


@functools.cache
def _every_character() -> str:
    """All Unicode scalar values (no surrogates): 1,112,064 characters."""
    points = np.r_[0:0xD800, 0xE000:0x110000].astype("<u4")
    return points.tobytes().decode("utf-32-le")  # 5x faster than joining chr()s


@functools.cache
def _members_regex(cls: str) -> str:
    """The characters `regex` puts in `cls`, in code point order."""
    return "".join(regex.findall(f"(?:{cls})+", _every_character()))


def _members_tiktoken(cls: str) -> str | None:
    """The characters tiktoken's regex puts in `cls`, in code point order, or None when it
    cannot compile it."""
    import tiktoken

    try:
        probe = tiktoken.Encoding("packlm-probe", pat_str=f"(?:{cls})+", mergeable_ranks=_BYTES,
                                  special_tokens={})  # fmt: skip
    except ValueError:
        return None
    # text no match covers is dropped: what comes back is the class's members
    return bytes(probe.encode_ordinary(_every_character())).decode("utf-8")


def _members_hf(cls: str) -> str | None:
    """The characters Hugging Face tokenizers' regex puts in `cls`, in code point order, or
    None."""
    from tokenizers import Regex, pre_tokenizers

    try:
        split = pre_tokenizers.Split(Regex(f"(?:{cls})+"), behavior="removed")
    except Exception:  # tokenizers raises its own error type for a bad pattern
        return None
    every, members, at = _every_character(), [], 0
    for _, (start, end) in split.pre_tokenize_str(every):  # the text between matches
        members.append(every[at:start])
        at = end
    return "".join(members) + every[at:]


ENGINES = {"tiktoken": ("tiktoken", _members_tiktoken), "hf": ("tokenizers", _members_hf)}


def _ranges(chars: str) -> str:
    """`chars` as a class body of ranges: "\\x{88F}\\x{C5C}-\\x{C5D}..."."""
    points, out, k = sorted(map(ord, chars)), [], 0
    while k < len(points):
        j = k
        while j + 1 < len(points) and points[j + 1] == points[j] + 1:
            j += 1
        out.append(f"\\x{{{points[k]:X}}}" + (f"-\\x{{{points[j]:X}}}" if j > k else ""))
        k = j + 1
    return "".join(out)


def _difference(have: str, want: str) -> tuple[str, str]:
    """(the characters of `want` not in `have`, those of `have` not in `want`): both hold
    characters in code point order, each once."""
    have_points, want_points = (
        np.frombuffer(t.encode("utf-32-le"), dtype="<u4") for t in (have, want)
    )
    inside = np.zeros((2, 0x110000), dtype=bool)
    inside[0, have_points], inside[1, want_points] = True, True
    extra, gone = want_points[~inside[0, want_points]], have_points[~inside[1, have_points]]
    return extra.tobytes().decode("utf-32-le"), gone.tobytes().decode("utf-32-le")


@functools.cache
def _aligned(cls: str, engine: str) -> str | None:
    """A class that has, in `engine`, `regex`'s members of the positive class `cls`; None
    when the engine cannot compile it or no rewrite makes the members equal. Members are
    compared as strings (sets of 140,000 letters took longer than matching them)."""
    members = ENGINES[engine][1]
    want, have = _members_regex(cls), members(cls)
    if have is None:
        return None
    if have == want:
        return cls
    extra, gone = _difference(have, want)
    fixed = f"[{cls}{_ranges(extra)}" + (f"&&[^{_ranges(gone)}]]" if gone else "]")
    return fixed if members(fixed) == want else None


CHECK_VERSION = 1
"""Of the rewrite below: a stored result of another version is recomputed."""


def store_dir() -> Path:
    """Where results are kept: the user's cache, as tiktoken and torch keep theirs."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "packlm" / "engine_patterns"


@functools.cache
def for_engine(pattern: str, engine: str) -> str | None:
    """`pattern` with each character class `engine` ("tiktoken" or "hf") would fill otherwise
    rewritten to `regex`'s members (`pattern` itself when none differs); None when the
    engine is not installed or that cannot be done. Kept on disk (`store_dir`)."""
    try:
        module = importlib.import_module(ENGINES[engine][0])
    except ImportError:
        return None
    key = {"check": CHECK_VERSION, "engine": engine, "pattern": pattern,
           "versions": {"regex": regex.__version__, module.__name__: module.__version__}}  # fmt: skip
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    path = store_dir() / f"{name}.json"
    try:
        found = json.loads(path.read_text("utf-8"))
        if found["key"] == key and isinstance(found["rewritten"], str | None):
            return found["rewritten"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or unreadable: recomputed
    rewritten = _rewrite(pattern, engine)
    with contextlib.suppress(OSError):  # a cache that cannot be written costs only time
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"key": key, "rewritten": rewritten}))
    return rewritten


def _rewrite(pattern: str, engine: str) -> str | None:
    out, last = [], 0
    for m in _ATOM.finditer(pattern):
        if m.group(0) == "\\\\":
            continue
        if m.group(1):  # \p{X} / \P{X}
            positive, negated = f"\\p{m.group(2)}", m.group(1) == "P"
        else:  # \s \S \d \D \w \W
            positive, negated = f"\\{m.group(3).lower()}", m.group(3).isupper()
        fixed = _aligned(positive, engine)
        if fixed is None:
            return None
        if fixed != positive:
            out += [pattern[last : m.start()], f"[^{fixed}]" if negated else fixed]
            last = m.end()
    return "".join(out) + pattern[last:]


def original(pattern: str) -> str:
    """The pattern `for_engine` rewrote into `pattern` (`pattern` itself if none was)."""

    def undo(m: regex.Match) -> str:
        if m.group(0) == "\\\\":
            return m.group(0)
        cls = m.group("cls")
        if not m.group("neg"):
            return cls
        return cls[:2].upper() + cls[2:] if cls[1] == "p" else cls.upper()

    return _REWRITTEN.sub(undo, pattern)
