"""The pattern another regex engine needs to pre-tokenize as the `regex` module does.

All engines read the same pattern, but each classifies characters by its own copy of the
Unicode tables: `regex` follows the newest Unicode version, tiktoken's Rust regex and
Hugging Face tokenizers' Oniguruma older ones. A letter added since (U+0C5C, CJK
Extension J at U+323B0, ...) is `\\p{L}` to one and not to the other, so the engines
split such text differently and give other ids.

1. Find the character classes in the pattern (`\\p{..}`, `\\P{..}`, `\\s`, `\\d`, `\\w` and
   their negations).
2. Find, over every Unicode scalar value, the characters the engine classes otherwise than
   `regex`: the engine matches the negated class over `regex`'s members and the class over
   the rest, so only the few in dispute come back as text.
3. Rewrite each class with such characters as a set expression, the difference added and
   taken away: `\\p{L}` -> `[\\p{L}\\x{88F}...&&[^...]]` (both engines read it).
4. Match the rewritten classes again: the rewritten pattern is used only when every class
   now has exactly `regex`'s members.

The probe (`for_engine`) takes about 0.2 s for GPT-2's pattern in tiktoken (a few seconds in
tokenizers), so each result is kept in `~/.cache/packlm/engine_patterns/` (`$XDG_CACHE_HOME`
respected), one small JSON file per pattern, engine and installed versions of `regex` and the
engine, whose Unicode tables are compiled into them; a file that does not name exactly these
is recomputed. Until a result is kept, `SeenCharacters` does the same check on only the
characters the texts bring, so a first load on a machine encodes at once
(`tiktoken_engine.CheckedTiktoken`). `original` undoes the rewrite, for a pattern read back
from an exported file.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import json
import os
from collections.abc import Callable
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
def _every_point() -> np.ndarray:
    """All Unicode scalar values (no surrogates), in order: 1,112,064 of them, as uint32."""
    return np.r_[0:0xD800, 0xE000:0x110000].astype("<u4")


@functools.cache
def _every_character() -> str:
    """All Unicode scalar values as one string."""
    return _every_point().tobytes().decode("utf-32-le")  # 5x faster than joining chr()s


def _points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


def _in_regex(cls: str, text: str) -> str:
    """The characters of `text` `regex` puts in `cls`, in their order."""
    return "".join(regex.findall(f"(?:{cls})+", text))


@functools.cache
def _members_regex(cls: str) -> str:
    """The characters `regex` puts in `cls`, in code point order."""
    return _in_regex(cls, _every_character())


@functools.cache
def _others_regex(cls: str) -> str:
    """The characters `regex` leaves out of `cls`, in code point order."""
    inside = np.zeros(0x110000, dtype=bool)
    inside[_points(_members_regex(cls))] = True
    every = _every_point()
    return every[~inside[every]].tobytes().decode("utf-32-le")


@functools.cache
def _tiktoken_probe(cls: str):
    """A tiktoken Encoding whose pre-tokens are runs of `cls` and whose tokens are bytes, or
    None when tiktoken cannot compile the class."""
    import tiktoken

    try:
        return tiktoken.Encoding("packlm-probe", pat_str=f"(?:{cls})+", mergeable_ranks=_BYTES,
                                 special_tokens={})  # fmt: skip
    except ValueError:
        return None


def _members_tiktoken(cls: str, text: str | None = None) -> str | None:
    """The characters of `text` (default: every character) tiktoken's regex puts in `cls`, in
    their order, or None when it cannot compile it."""
    probe = _tiktoken_probe(cls)
    if probe is None:
        return None
    # text no match covers is dropped: what comes back is the class's members
    return bytes(probe.encode_ordinary(_every_character() if text is None else text)).decode()


def _members_hf(cls: str, text: str | None = None) -> str | None:
    """The characters of `text` (default: every character) Hugging Face tokenizers' regex
    puts in `cls`, in their order, or None."""
    from tokenizers import Regex, pre_tokenizers

    try:
        split = pre_tokenizers.Split(Regex(f"(?:{cls})+"), behavior="removed")
    except Exception:  # tokenizers raises its own error type for a bad pattern
        return None
    text, members, at = _every_character() if text is None else text, [], 0
    for _, (start, end) in split.pre_tokenize_str(text):  # the text between matches
        members.append(text[at:start])
        at = end
    return "".join(members) + text[at:]


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


def _disagreement(cls: str, engine: str, engine_cls: str) -> tuple[str, str] | None:
    """(the members `regex` gives `cls` that `engine` leaves out of `engine_cls`, the
    characters `engine` puts in `engine_cls` that `regex` leaves out of `cls`), over every
    character; None when the engine cannot compile `engine_cls`. The engine matches the
    negated class over `regex`'s members and the class over the rest, so only the few
    characters in dispute come back (not the 140,000 letters of \\p{L})."""
    members = ENGINES[engine][1]
    missing = members(f"[^{engine_cls}]", _members_regex(cls))
    surplus = members(engine_cls, _others_regex(cls))
    return None if missing is None or surplus is None else (missing, surplus)


def _fixed(cls: str, missing: str, surplus: str) -> str:
    """`cls` with the characters `missing` added and `surplus` taken away, as a set expression
    both engines read (`cls` itself when both are empty)."""
    if not missing and not surplus:
        return cls
    return f"[{cls}{_ranges(missing)}" + (f"&&[^{_ranges(surplus)}]]" if surplus else "]")


@functools.cache
def _aligned(cls: str, engine: str) -> str | None:
    """A class that has, in `engine`, `regex`'s members of the positive class `cls`; None
    when the engine cannot compile it or no rewrite makes the members equal."""
    found = _disagreement(cls, engine, cls)
    if found is None:
        return None
    if found == ("", ""):
        return cls
    fixed = _fixed(cls, *found)
    return fixed if _disagreement(cls, engine, fixed) == ("", "") else None


def _class_atoms(pattern: str):
    """(match, positive class, negated) for each class escape in `pattern`: \\P{L} gives
    \\p{L}, True; \\S gives \\s, True."""
    for m in _ATOM.finditer(pattern):
        if m.group(0) == "\\\\":
            continue
        if m.group(1):  # \p{X} / \P{X}
            yield m, f"\\p{m.group(2)}", m.group(1) == "P"
        else:  # \s \S \d \D \w \W
            yield m, f"\\{m.group(3).lower()}", m.group(3).isupper()


class SeenCharacters:
    """The probe of every character (`for_engine`), done a few characters at a time on those
    the texts bring: which characters have been checked, which of them `engine` classes
    otherwise than `regex` in a class of `pattern`, and the pattern rewritten for those
    (`rewritten`). A new character costs a match of the new ones in both engines; one already
    checked, a lookup in a table of all code points (1.1 MB)."""

    def __init__(self, pattern: str, engine: str):
        self.pattern = pattern
        self.classes = list(dict.fromkeys(cls for _, cls, _ in _class_atoms(pattern)))
        self.engine = engine
        self.checked = np.zeros(0x110000, dtype=bool)
        self.missing = dict.fromkeys(self.classes, "")  # regex's members the engine leaves out
        self.surplus = dict.fromkeys(self.classes, "")  # the engine's that regex leaves out

    def check(self, text: str) -> bool | None:
        """Check the characters of `text` not checked before. True when the engine classes
        each of them as `regex` does; False when it classes some otherwise (kept: `rewritten`
        now fixes them); None when it cannot compile one of the classes."""
        try:
            points = _points(text)
        except UnicodeEncodeError:  # a lone surrogate: tiktoken matches U+FFFD in its place
            points = _points(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
        new = points[~self.checked[points]]
        if not len(new):
            return True
        new = np.sort(new)  # and unique: not np.unique, whose first call imports numpy.ma (10 ms)
        new = new[np.r_[True, new[1:] != new[:-1]]]
        chars = new.tobytes().decode("utf-32-le")
        alike = True
        for cls in self.classes:  # on new characters the fixed class is the class as written
            have = ENGINES[self.engine][1](cls, chars)
            if have is None:
                return None
            want = _in_regex(cls, chars)
            if have != want:
                have, want = set(have), set(want)
                self.missing[cls] += "".join(sorted(want - have))
                self.surplus[cls] += "".join(sorted(have - want))
                alike = False
        self.checked[new] = True
        return alike

    def rewritten(self) -> str | None:
        """The pattern with each class fixed for the characters found so far to be classed
        otherwise (the pattern itself while none is); None when the engine does not read a
        fixed class with `regex`'s members of every character checked."""
        fixed = {cls: _fixed(cls, self.missing[cls], self.surplus[cls]) for cls in self.classes}
        changed = [cls for cls in self.classes if fixed[cls] != cls]
        if changed:
            checked = np.flatnonzero(self.checked).astype("<u4").tobytes().decode("utf-32-le")
            for cls in changed:
                have = ENGINES[self.engine][1](fixed[cls], checked)
                if have != _in_regex(cls, checked):
                    return None
        return rewrite_classes(self.pattern, fixed.__getitem__)


CHECK_VERSION = 1
"""Of the rewrite below: a stored result of another version is recomputed."""


def store_dir() -> Path:
    """Where results are kept: the user's cache, as tiktoken and torch keep theirs."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "packlm" / "engine_patterns"


def _entry(pattern: str, engine: str) -> tuple[dict, Path] | None:
    """(key, file) of `pattern`'s result for `engine`; None when the engine is not installed."""
    try:
        module = importlib.import_module(ENGINES[engine][0])
    except ImportError:
        return None
    key = {"check": CHECK_VERSION, "engine": engine, "pattern": pattern,
           "versions": {"regex": regex.__version__, module.__name__: module.__version__}}  # fmt: skip
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return key, store_dir() / f"{name}.json"


def _read(key: dict, path: Path) -> tuple[bool, str | None]:
    try:
        found = json.loads(path.read_text("utf-8"))
        if found["key"] == key and isinstance(found["rewritten"], str | None):
            return True, found["rewritten"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or unreadable: recomputed
    return False, None


def stored(pattern: str, engine: str) -> tuple[bool, str | None]:
    """(True, `for_engine`'s result) when it is known without probing (kept on disk, or the
    engine is not installed); else (False, None)."""
    entry = _entry(pattern, engine)
    return (True, None) if entry is None else _read(*entry)


@functools.cache
def for_engine(pattern: str, engine: str) -> str | None:
    """`pattern` with each character class `engine` ("tiktoken" or "hf") would fill otherwise
    rewritten to `regex`'s members (`pattern` itself when none differs); None when the
    engine is not installed or that cannot be done. Kept on disk (`store_dir`)."""
    entry = _entry(pattern, engine)
    if entry is None:
        return None
    found, rewritten = _read(*entry)
    if found:
        return rewritten
    rewritten = _rewrite(pattern, engine)
    key, path = entry
    with contextlib.suppress(OSError):  # a cache that cannot be written costs only time
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"key": key, "rewritten": rewritten}))
    return rewritten


def _rewrite(pattern: str, engine: str) -> str | None:
    """The probe of all of Unicode: `pattern` with every class aligned for `engine`."""
    return rewrite_classes(pattern, lambda cls: _aligned(cls, engine))


def rewrite_classes(pattern: str, fixed: Callable[[str], str | None]) -> str | None:
    """`pattern` with each class escape replaced by `fixed` of its positive class (a negated
    one as `[^...]` of it); None where `fixed` gives None."""
    out, last = [], 0
    for m, positive, negated in _class_atoms(pattern):
        cls = fixed(positive)
        if cls is None:
            return None
        if cls != positive:
            out += [pattern[last : m.start()], f"[^{cls}]" if negated else cls]
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
