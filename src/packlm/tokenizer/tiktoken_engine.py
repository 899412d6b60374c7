"""tiktoken's Rust core as the encoder's fast engine: the Encoding of checked ranks, split as
`regex` splits (`engine_pattern`), and checked character by character until the probe of the
pattern is kept on disk (`CheckedTiktoken`). Which ranks are safe to give it is encoder.py's
check (`tiktoken_ranks`); what it must equal is encoder.py's `PythonEncoder`.
"""

from __future__ import annotations

from collections.abc import Callable

from packlm.tokenizer import engine_pattern
from packlm.tokenizer.encoder import PythonEncoder


def tiktoken_encoding(ranks: dict[bytes, int], pattern: str, name: str, special_tokens=None):
    """A tiktoken.Encoding splitting text as `regex` does with `pattern` (its classes
    rewritten for tiktoken's Unicode tables, `engine_pattern`), or None when tiktoken is absent,
    rejects the pattern or cannot be given `regex`'s classes."""
    try:
        import tiktoken
    except ImportError:
        return None
    rust = engine_pattern.for_engine(pattern, "tiktoken")
    return None if rust is None else _encoding(tiktoken, ranks, rust, name, special_tokens)


def _encoding(tiktoken, ranks: dict[bytes, int], rust: str, name: str, special_tokens=None):
    try:
        return tiktoken.Encoding(
            name, pat_str=rust, mergeable_ranks=ranks, special_tokens=special_tokens or {}
        )
    except Exception:  # fancy-regex rejects the pattern
        return None


ASCII = "".join(map(chr, range(128)))
LOOKUPS_BEFORE_PROBE = 1 << 25
"""Characters of non-ASCII text `CheckedTiktoken` looks up before it probes all of Unicode
instead: at 6-9 ns a character (5% of tiktoken's encode of them), 0.2-0.3 s in all, what
the probe costs once; after that it has paid for itself."""
BUILDS_BEFORE_PROBE = 5
"""Encodings `CheckedTiktoken` builds (about 20 ms each at GPT-2's 50k ranks) before it probes
all of Unicode instead (about 0.1 s): texts that keep bringing new letters tiktoken's tables
lack (4,298 in CJK Extension J alone) then cost one probe, not a build each."""


def tiktoken_encoder(
    ranks: dict[bytes, int], pattern: str, python: Callable[[], PythonEncoder], probe: bool = False
) -> Callable[[str], list[int]] | None:
    """tiktoken's encode_ordinary splitting text as `regex` does with `pattern`, or None (as
    `tiktoken_encoding`). When no probe result is stored for the pattern yet and probe is
    False, a `CheckedTiktoken`: the probe of all of Unicode (0.1-0.2 s, once per machine and
    installed versions) is not paid before the first encode, nor for the text most runs see.
    python: makes the Python engine, should no tiktoken pattern do."""
    try:
        import tiktoken
    except ImportError:
        return None
    known, _ = engine_pattern.stored(pattern, "tiktoken")
    if not (probe or known):
        return CheckedTiktoken(tiktoken, ranks, pattern, python)
    encoding = tiktoken_encoding(ranks, pattern, "packlm")
    return None if encoding is None else encoding.encode_ordinary


class CheckedTiktoken:
    """tiktoken with `pattern` fixed for the characters seen so far. Each character is
    checked in both engines the first time a text brings it (ASCII at the first encode,
    `engine_pattern.SeenCharacters`); one tiktoken classes otherwise is added to or taken
    from its class in the pattern, and the Encoding is built again (about 20 ms for GPT-2's
    ranks; the first one is built after the first text is checked, so a first text with such
    a character costs one build, not two). More characters looked up than
    `LOOKUPS_BEFORE_PROBE`, more builds than `BUILDS_BEFORE_PROBE`, or a fixed class tiktoken
    does not read as meant runs the probe of all of Unicode instead (`engine_pattern.for_engine`,
    kept on disk) and switches to its pattern, or to the Python engine where none works."""

    def __init__(self, tiktoken, ranks: dict[bytes, int], pattern: str, python: Callable):
        self.tiktoken, self.ranks, self.pattern, self.python = tiktoken, ranks, pattern, python
        self.seen = engine_pattern.SeenCharacters(pattern, "tiktoken")
        self.encode = None  # tiktoken's encode_ordinary with seen.rewritten()
        self.final = None  # after the probe of all of Unicode: its pattern's, or Python's
        self._engine = "tiktoken"
        self.looked_up = 0  # characters of non-ASCII text
        self.builds = 0

    @property
    def engine(self) -> str:
        """The engine in use: tiktoken, or Python once no tiktoken pattern does (known from
        the first build on)."""
        if self.encode is None and self.final is None:
            self._check(ASCII)
        return self._engine

    def __call__(self, text: str) -> list[int]:
        if self.final is None:
            if text.isascii():  # isascii: O(1) for str
                if self.encode is None:
                    self._check(ASCII)
            else:
                self.looked_up += len(text)
                if self.looked_up > LOOKUPS_BEFORE_PROBE:
                    self._probe()
                else:
                    self._check(ASCII + text if self.encode is None else text)
        return (self.final or self.encode)(text)

    def _check(self, text: str) -> None:
        """Check the new characters of `text`; build the Encoding again if the pattern changed."""
        alike = self.seen.check(text)
        if alike is None:
            return self._probe()
        if alike and self.encode is not None:
            return None
        self.builds += 1
        rewritten = self.builds <= BUILDS_BEFORE_PROBE and self.seen.rewritten()
        encoding = rewritten and _encoding(self.tiktoken, self.ranks, rewritten, "packlm")
        if not encoding:
            return self._probe()
        self.encode = encoding.encode_ordinary
        return None

    def _probe(self) -> None:
        encoding = tiktoken_encoding(self.ranks, self.pattern, "packlm")
        self.final = encoding and encoding.encode_ordinary
        if self.final is None:
            self.final, self._engine = self.python().encode, "python"


def tiktoken_export(ranks: dict[bytes, int] | None, pattern: str, name: str, special_tokens):
    """`Tokenizer.to_tiktoken`: the Encoding, or a clear error why there is none."""
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        raise ImportError('to_tiktoken() needs tiktoken: pip install "packlm[tiktoken]"') from None
    if ranks is None:
        raise ValueError(
            "no tiktoken Encoding gives this vocabulary's ids: merge ids do not rise in "
            "merge order, or a merged token does not encode to itself"
        )
    encoding = tiktoken_encoding(ranks, pattern, name, special_tokens)
    if encoding is None:
        raise ValueError(
            f"tiktoken cannot compile the pattern {pattern!r}, or not with the Unicode "
            "classes of the regex module"
        )
    return encoding
