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


def tiktoken_encoder(
    ranks: dict[bytes, int], pattern: str, python: Callable[[], PythonEncoder], probe: bool = False
) -> Callable[[str], list[int]] | None:
    """tiktoken's encode_ordinary splitting text as `regex` does with `pattern`, or None (as
    `tiktoken_encoding`). When no probe result is stored for the pattern yet and probe is
    False, a `CheckedTiktoken`: the probe of all of Unicode (0.2 s, once per machine and
    installed versions) is not paid before the first encode, nor at all for ASCII text.
    python: makes the Python engine, should no tiktoken pattern do."""
    try:
        import tiktoken
    except ImportError:
        return None
    known, _ = engine_pattern.stored(pattern, "tiktoken")
    plain = None if probe or known else _encoding(tiktoken, ranks, pattern, "packlm")
    if plain is not None:
        seen = engine_pattern.SeenCharacters(pattern, "tiktoken")
        if seen.agree(ASCII):
            return CheckedTiktoken(plain.encode_ordinary, seen, ranks, pattern, python)
    encoding = tiktoken_encoding(ranks, pattern, "packlm")
    return None if encoding is None else encoding.encode_ordinary


class CheckedTiktoken:
    """tiktoken with `pattern` as written, for texts whose characters it is seen to class as
    `regex` does: ASCII at once, the rest as they come (`engine_pattern.SeenCharacters`).
    The first text with a character it classes otherwise, or more characters looked up than
    `LOOKUPS_BEFORE_PROBE`, runs the probe of all of Unicode (`engine_pattern.for_engine`,
    kept on disk) and switches to its pattern, or to the Python engine where none works."""

    def __init__(self, plain: Callable, seen, ranks, pattern: str, python: Callable):
        self.plain, self.seen, self.ranks, self.pattern = plain, seen, ranks, pattern
        self.python, self.final, self.engine = python, None, "tiktoken"
        self.looked_up = 0  # characters of non-ASCII text

    def __call__(self, text: str) -> list[int]:
        if self.final is None and not text.isascii():  # isascii: O(1) for str
            self.looked_up += len(text)
            if self.looked_up > LOOKUPS_BEFORE_PROBE or not self.seen.agree(text):
                encoding = tiktoken_encoding(self.ranks, self.pattern, "packlm")
                self.final = encoding and encoding.encode_ordinary
                if self.final is None:
                    self.final, self.engine = self.python().encode, "python"
        return (self.final or self.plain)(text)


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
