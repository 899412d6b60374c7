"""`Tokenizer`: a trained or loaded byte-level BPE vocabulary, used to encode and decode.

Any dense id layout works (GPT-2's files put the bytes in its own order and the special
token last; packlm's trainer puts special tokens first): ids are found from the bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator

import numpy as np

from packlm.tokenizer.encoder import PythonEncoder, tiktoken_encoding, tiktoken_ranks
from packlm.tokenizer.pretokenize import (
    check_special_tokens,
    resolve_pattern,
    special_regex,
    split_special,
    stream_cut,
)

STREAM_CHARS = 1 << 16  # text buffered by encode_iterable before it looks for a cut


class Tokenizer:
    """Byte-level BPE. engine: "auto" (tiktoken when installed and equivalent, else
    Python), "python", or "tiktoken" (an error when that is not possible)."""

    def __init__(
        self,
        vocab: dict[int, bytes],
        merges: Iterable[tuple[bytes, bytes]],
        special_tokens: Iterable[str] | None = None,
        pattern: str = "gpt2",
        *,
        engine: str = "auto",
    ):
        if engine not in ("auto", "python", "tiktoken"):
            raise ValueError(f"engine={engine!r}: expected 'auto', 'python' or 'tiktoken'")
        self.pattern, self.engine_request = pattern, engine
        self.pattern_regex = resolve_pattern(pattern)
        self.special_tokens = check_special_tokens(special_tokens)
        self.vocab = _check_vocab(vocab)
        self.merges = [(bytes(a), bytes(b)) for a, b in merges]

        self.special_token_ids = self._place_special_tokens()
        specials = set(self.special_token_ids.values())
        n = len(self.vocab)  # ordinary bytes -> id (the lowest, should two share them):
        ids_of = {self.vocab[i]: i for i in range(n - 1, -1, -1) if i not in specials}
        missing = [b for b in range(256) if bytes([b]) not in ids_of]
        if missing:
            raise ValueError(f"vocab: no id for the byte(s) {missing[:8]} (all 256 are needed)")
        self._byte_ids = [ids_of[bytes([b])] for b in range(256)]
        try:  # (left id, right id, merged id) in merge order
            self._merge_ids = [(ids_of[a], ids_of[b], ids_of[a + b]) for a, b in self.merges]
        except KeyError:  # name the first merge that does not fit
            k = next(k for k, (a, b) in enumerate(self.merges) if {a, b, a + b} - ids_of.keys())
            bad = f"merges[{k}] = {self.merges[k]}"
            raise ValueError(f"{bad}: a token or their merge is not in vocab") from None

        self._table = [self.vocab[i] for i in range(len(self.vocab))]
        self._specials_re = special_regex(self.special_tokens)
        self._longest_special = max(map(len, self.special_tokens), default=0)
        self._encoder = None  # built at the first encode
        self._engine = ""
        self._reference: PythonEncoder | None = None
        self._ranks: dict[bytes, int] | None = None  # tiktoken's ranks ({}: none can work)
        self._digest: str | None = None
        self.tiktoken_checked = False  # set by formats.load_dir when the saved config vouches

    def _place_special_tokens(self) -> dict[str, int]:
        """Each special token gets the lowest id holding its bytes, else a new id at the end."""
        ids = {}
        for s in self.special_tokens:
            token = s.encode("utf-8")
            found = [i for i, t in self.vocab.items() if t == token]
            ids[s] = min(found) if found else len(self.vocab)
            self.vocab.setdefault(ids[s], token)
        return ids

    # ---- encoding -------------------------------------------------------------------

    def _ordinary(self, text: str) -> list[int]:
        if self._encoder is None:
            self._build_encoder()
        return self._encoder(text)

    def _build_encoder(self) -> None:
        fast = None
        if self.engine_request != "python":
            ranks = self._tiktoken_ranks()
            encoding = ranks and tiktoken_encoding(ranks, self.pattern_regex, self._name())
            fast = encoding.encode_ordinary if encoding else None
            if fast is None and self.engine_request == "tiktoken":
                raise ValueError(
                    "engine='tiktoken': tiktoken is absent, cannot compile the "
                    "pattern, or would not give the same ids for this vocab"
                )
        self._encoder = fast or self._python_encoder().encode
        self._engine = "tiktoken" if fast else "python"

    def _python_encoder(self) -> PythonEncoder:
        if self._reference is None:
            self._reference = PythonEncoder(self._byte_ids, self._merge_ids, self.pattern_regex)
        return self._reference

    def _tiktoken_ranks(self) -> dict[bytes, int] | None:
        """Token bytes -> id for tiktoken, or None when no ranks give merge-order BPE's ids."""
        if self._ranks is None:
            reference = None if self.tiktoken_checked else self._python_encoder()
            ranks = tiktoken_ranks(self.vocab, self._merge_ids, self._byte_ids, reference)
            self._ranks = ranks or {}
        return self._ranks or None

    def _name(self) -> str:  # the tiktoken Encoding's name
        return f"packlm-{self.digest()[:16]}"

    def to_tiktoken(self):
        """A `tiktoken.Encoding` giving the same ids, special tokens included (as with any
        tiktoken Encoding, `encode(text, allowed_special="all")` is this `encode`)."""
        try:
            import tiktoken  # noqa: F401
        except ImportError:
            raise ImportError(
                'to_tiktoken() needs tiktoken: pip install "packlm[tiktoken]"'
            ) from None
        ranks = self._tiktoken_ranks()
        if ranks is None:
            raise ValueError(
                "no tiktoken Encoding gives this vocabulary's ids: merge ids do not rise in "
                "merge order, or a merged token does not encode to itself"
            )
        name, specials = self._name(), self.special_token_ids
        encoding = tiktoken_encoding(ranks, self.pattern_regex, name, specials)
        if encoding is None:
            raise ValueError(f"tiktoken cannot compile the pattern {self.pattern!r}")
        return encoding

    @property
    def engine(self) -> str:
        """The engine in use: "tiktoken" or "python"."""
        if self._encoder is None:
            self._build_encoder()
        return self._engine

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; special-token strings in it become their special ids."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected str, got {type(text).__name__}")
        ids: list[int] = []
        for piece, is_special in split_special(text, self._specials_re):
            if is_special:
                ids.append(self.special_token_ids[piece])
            else:
                ids += self._ordinary(piece)
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of `text` with special-token strings encoded as ordinary text."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected str, got {type(text).__name__}")
        return self._ordinary(text)

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """The ids of "".join(iterable), produced lazily in bounded memory: the text is
        buffered only up to a place where cutting it cannot change the ids."""
        parts: list[str] = []
        size, next_look = 0, STREAM_CHARS
        for chunk in iterable:
            parts.append(chunk)
            size += len(chunk)
            if size < next_look:
                continue
            text = "".join(parts)
            cut = stream_cut(text, self._specials_re, self._longest_special)
            if cut:
                yield from self.encode(text[:cut])
            parts, size = [text[cut:]], len(text) - cut
            next_look = size + STREAM_CHARS  # without a cut, look again after as much text
        yield from self.encode("".join(parts))

    # ---- decoding and token facts ---------------------------------------------------

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; bytes that do not form UTF-8 (a cut character) become U+FFFD."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if ids and (min(ids) < 0 or max(ids) >= len(self._table)):
            bad = next(i for i in ids if not 0 <= i < len(self._table))
            raise ValueError(f"ids: {bad} is not a token id (vocab_size={self.vocab_size})")
        return b"".join(map(self._table.__getitem__, ids)).decode("utf-8", errors="replace")

    @property
    def vocab_size(self) -> int:
        return len(self._table)

    def token_bytes(self, token_id: int) -> bytes:
        if not 0 <= token_id < len(self._table):
            raise ValueError(f"token_id={token_id}: out of range [0, {self.vocab_size})")
        return self._table[token_id]

    def token_byte_lengths(self) -> np.ndarray:
        """UTF-8 bytes per id (special tokens 0): the denominator of bits per byte."""
        lengths = np.fromiter(map(len, self._table), dtype=np.int64, count=len(self._table))
        lengths[list(self.special_token_ids.values())] = 0
        return lengths

    def digest(self) -> str:
        """sha256 over pattern, special tokens, vocab and merges: same digest, same ids."""
        if self._digest is None:
            self._digest = self._compute_digest()
        return self._digest

    def _compute_digest(self) -> str:
        h = hashlib.sha256(b"packlm-bpe-1\0")
        h.update(self.pattern_regex.encode("utf-8") + b"\0")
        h.update(json.dumps(self.special_tokens).encode("utf-8") + b"\0")
        h.update(b"".join([len(t).to_bytes(4, "little") + t for t in self._table]))
        h.update(
            b"".join([len(a).to_bytes(4, "little") + a + len(b).to_bytes(4, "little") + b
                      for a, b in self.merges])
        )  # fmt: skip
        return h.hexdigest()

    # ---- files and pickling ----------------------------------------------------------

    @classmethod
    def from_files(
        cls,
        vocab_path: str | os.PathLike,
        merges_path: str | os.PathLike,
        special_tokens: Iterable[str] | None = None,
        **kwargs,
    ) -> Tokenizer:
        """Load GPT-2 style vocab.json + merges.txt (byte-to-unicode strings)."""
        from packlm.tokenizer import formats

        special_tokens = check_special_tokens(special_tokens)
        vocab = formats.read_vocab_json(vocab_path, special_tokens)
        return cls(vocab, formats.read_merges_txt(merges_path), special_tokens, **kwargs)

    def save(self, directory: str | os.PathLike) -> None:
        """Write vocab.json, merges.txt and tokenizer_config.json (each atomically)."""
        from packlm.tokenizer import formats

        formats.save_dir(self, directory)

    @classmethod
    def load(cls, directory: str | os.PathLike, **kwargs) -> Tokenizer:
        from packlm.tokenizer import formats

        return formats.load_dir(cls, directory, **kwargs)

    def save_hf(self, path: str | os.PathLike) -> None:
        """Write a Hugging Face tokenizer.json giving the same ids."""
        from packlm.tokenizer import hf

        hf.save_tokenizer_json(self, path)

    def __getstate__(self) -> dict:
        return {
            "vocab": {i: t for i, t in enumerate(self._table)},
            "merges": self.merges,
            "special_tokens": self.special_tokens,
            "pattern": self.pattern,
            "engine": self.engine_request,
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={self.special_tokens}, pattern={self.pattern!r})"
        )


def _check_vocab(vocab: dict[int, bytes]) -> dict[int, bytes]:
    if not isinstance(vocab, dict) or not vocab:
        raise ValueError("vocab: expected a non-empty dict[int, bytes]")
    if all(type(i) is int for i in vocab) and all(type(t) is bytes for t in vocab.values()):
        out = dict(vocab)  # the common case, checked without a Python step per entry
    else:
        out = {}
        for i, t in vocab.items():
            if (
                isinstance(i, bool)
                or not isinstance(i, int)
                or not isinstance(t, bytes | bytearray)
            ):
                raise ValueError(f"vocab: entry {i!r}: {t!r} is not int -> bytes")
            out[i] = bytes(t)
    if len(out) - 1 != max(out) or min(out) != 0:
        raise ValueError(f"vocab: ids must be 0..{len(out) - 1} without gaps")
    return out
