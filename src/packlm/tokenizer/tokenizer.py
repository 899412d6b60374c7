"""`Tokenizer`: a trained or loaded byte-level BPE vocabulary, used to encode and decode.

Any dense id layout works (GPT-2's files put the bytes in its own order and the special
token last; packlm's trainer puts special tokens first): ids are found from the bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import numpy as np

from packlm.tokenizer import encoder, formats, tiktoken_engine
from packlm.tokenizer.encoder import PythonEncoder, id_tables, tiktoken_ranks
from packlm.tokenizer.pretokenize import (
    check_special_tokens,
    resolve_pattern,
    special_regex,
    split_special,
    stream_cut,
)
from packlm.tokenizer.tables import with_tables

STREAM_CHARS = 1 << 16  # text buffered by encode_iterable before it looks for a cut


class Tokenizer:
    """Byte-level BPE. engine: "auto" (tiktoken when installed and equivalent, else Python),
    "python", or "tiktoken" (an error when that is impossible). verdict: `__getstate__`'s."""

    def __init__(
        self,
        vocab: dict[int, bytes],
        merges: Iterable[tuple[bytes, bytes]],
        special_tokens: Iterable[str] | None = None,
        pattern: str = "gpt2",
        *,
        engine: str = "auto",
        verdict: dict | None = None,
    ):
        self._set_options(pattern, engine)
        self.special_tokens = check_special_tokens(special_tokens)
        self._merges = [(bytes(a), bytes(b)) for a, b in merges]
        self._vocab, self.special_token_ids, self._byte_ids, self._merge_list = id_tables(
            vocab, self._merges, self.special_tokens
        )
        self._table = [self._vocab[i] for i in range(len(self._vocab))]
        self._merge_array = None  # made from _merge_list when asked for
        self._start()
        passed = None if verdict is None else encoder.trusted_verdict(verdict, self.digest())
        if passed is not None:  # `verdict` is of these very tables: the check is not rerun
            self.tiktoken_checked, self._ranks = passed, (None if passed else {})

    def _set_options(self, pattern: str, engine: str) -> None:
        if engine not in ("auto", "python", "tiktoken"):
            raise ValueError(f"engine={engine!r}: expected 'auto', 'python' or 'tiktoken'")
        self.pattern, self.engine_request = pattern, engine
        self.pattern_regex = resolve_pattern(pattern)

    def _start(self) -> None:
        """The state both constructors share; what is derived later starts empty."""
        self._specials_re = special_regex(self.special_tokens)
        self._longest_special = max(map(len, self.special_tokens), default=0)
        self._encoder, self._engine = None, ""  # built at the first encode
        self._reference: PythonEncoder | None = None
        self._ranks: dict[bytes, int] | None = None  # tiktoken's ranks ({}: none can work)
        self._digest: str | None = None
        self.tiktoken_checked = False  # set when a saved config (or a pickle) vouches

    @classmethod
    def _from_tables(cls, tables: dict, engine: str = "auto") -> Tokenizer:
        """The tokenizer of these tables, kept by tables.py (nothing is checked again); merges
        become Python objects only when asked for."""
        self = cls.__new__(cls)
        self._set_options(tables["pattern"], engine)
        self.special_token_ids = tables["special_token_ids"]
        self.special_tokens = list(self.special_token_ids)
        self._table, self._byte_ids = tables["table"], tables["byte_ids"]
        self._vocab = None  # made when asked for
        self._merge_array = tables["merge_ids"]  # (merges, 3) int: left, right, merged id
        self._merges = self._merge_list = None
        self._start()
        self._digest = tables.get("digest")
        if tables.get("tiktoken") is not None:
            self._ranks = encoder.rank_table(self._table, self._byte_ids, self._merge_array)
            self._ranks = self._ranks if tables["tiktoken"] else {}
        return self

    def _tables(self) -> dict:
        """What a load derives from its files, for tables.py to keep (exact: no check skipped)."""
        return {"table": self._table, "byte_ids": self._byte_ids, "pattern": self.pattern,
                "merge_ids": self._merge_rows, "special_token_ids": self.special_token_ids,
                "digest": self.digest(), "tiktoken": self._tiktoken_ranks() is not None}  # fmt: skip

    @property
    def vocab(self) -> dict[int, bytes]:  # token id -> its bytes
        if self._vocab is None:
            self._vocab = dict(enumerate(self._table))
        return self._vocab

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The merges in order, as (left bytes, right bytes)."""
        if self._merges is None:  # loaded from tables: made from the merge ids
            self._merges = [(self._table[a], self._table[b]) for a, b, _ in self._merge_ids]
        return self._merges

    @property
    def _merge_ids(self) -> list[tuple[int, int, int]]:  # (left, right, merged id) per merge
        if self._merge_list is None:
            self._merge_list = list(map(tuple, self._merge_array.tolist()))
        return self._merge_list

    @property
    def _merge_rows(self) -> np.ndarray:  # (merges, 3) int32: the same as an array
        if self._merge_array is None:
            self._merge_array = np.array(self._merge_list, dtype=np.int32).reshape(-1, 3)
        return self._merge_array

    def _ordinary(self, text: str) -> list[int]:
        if self._encoder is None:
            self._build_encoder()
        return self._encoder(text)

    def _build_encoder(self) -> None:
        fast = None
        if self.engine_request != "python":
            ranks = self._tiktoken_ranks()
            probe = self.engine_request == "tiktoken"  # an error now, not at some text
            fast = ranks and tiktoken_engine.tiktoken_encoder(
                ranks, self.pattern_regex, self._python_encoder, probe
            )
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
        if self._ranks is None:  # the slow part of the check only if no verdict vouches
            reference = None if self.tiktoken_checked else self._python_encoder
            ranks = tiktoken_ranks(self._table, self._merge_rows, self._byte_ids, reference)
            self._ranks = ranks or {}
        return self._ranks or None

    def to_tiktoken(self):
        """A `tiktoken.Encoding` giving the same ids, special tokens included (as with any
        tiktoken Encoding, `encode(text, allowed_special="all")` is this `encode`)."""
        name = f"packlm-{self.digest()[:16]}"
        return tiktoken_engine.tiktoken_export(self._tiktoken_ranks(), self.pattern_regex, name,
                               self.special_token_ids)  # fmt: skip

    @property
    def engine(self) -> str:
        """The engine in use: "tiktoken" or "python"."""
        if self._encoder is None:
            self._build_encoder()
        if isinstance(
            self._encoder, tiktoken_engine.CheckedTiktoken
        ):  # may turn to Python at a text
            return self._encoder.engine
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
            args = self.pattern_regex, self.special_tokens, self._table, self._merge_rows
            self._digest = formats.digest(*args)
        return self._digest

    @classmethod
    def from_files(
        cls,
        vocab_path: str | os.PathLike,
        merges_path: str | os.PathLike,
        special_tokens: Iterable[str] | None = None,
        pattern: str = "gpt2",
        *,
        engine: str = "auto",
        cache_dir: str | os.PathLike | None = None,
    ) -> Tokenizer:
        """Load GPT-2 style vocab.json + merges.txt (byte-to-unicode strings). With a
        `cache_dir`, what loading derives is kept there for the next load (tables.py)."""
        special_tokens = check_special_tokens(special_tokens)

        def build() -> Tokenizer:
            return formats.read_gpt2(cls, vocab_path, merges_path, special_tokens, pattern, engine)

        options = {"files": "gpt2", "special_tokens": special_tokens, "pattern": pattern}
        return with_tables(cls, cache_dir, [vocab_path, merges_path], options, build, engine)

    def save(self, directory: str | os.PathLike) -> None:
        """Write vocab.json, merges.txt and tokenizer_config.json (each atomically)."""
        formats.save_dir(self, directory)

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        *,
        engine: str = "auto",
        cache_dir: str | os.PathLike | None = None,
    ) -> Tokenizer:
        """Load a directory written by `save` (its digest checked); `cache_dir` as in from_files."""
        files = [os.path.join(directory, name) for name in formats.SAVED_FILES]
        build = lambda: formats.load_dir(cls, directory, engine=engine)  # noqa: E731
        return with_tables(cls, cache_dir, files, {"files": "saved"}, build, engine)

    def save_hf(self, path: str | os.PathLike) -> None:
        """Write a Hugging Face tokenizer.json giving the same ids."""
        from packlm.tokenizer import hf

        hf.save_tokenizer_json(self, path)

    def __getstate__(self, check: bool = True) -> dict:
        """Plain data (checkpoints, meta.pkl); `Tokenizer(**state)` trusts its tiktoken verdict
        (checked here unless check=False) only for tables of its digest: 0.02 s, the check 0.2."""
        state = {"vocab": dict(enumerate(self._table)), "merges": self.merges,
                 "special_tokens": self.special_tokens, "pattern": self.pattern,
                 "engine": self.engine_request}  # fmt: skip
        if check or self._ranks is not None or self.tiktoken_checked:
            passed = self._tiktoken_ranks() is not None
            state["verdict"] = encoder.tiktoken_verdict(self.digest(), passed)
        return state

    def __setstate__(self, state: dict) -> None:  # pickles of older versions
        self.__init__(**state)

    def __reduce__(self):  # pickle (worker processes): a verdict travels only if found
        return _unpickle, (type(self), self.__getstate__(check=False))

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, merges={len(self._merge_rows)}, "
                f"special_tokens={self.special_tokens}, pattern={self.pattern!r})")  # fmt: skip


def _unpickle(cls, state: dict, tiktoken_checked: bool = False) -> Tokenizer:
    tokenizer = cls(**state)
    tokenizer.tiktoken_checked |= tiktoken_checked  # an older pickle: its process checked
    return tokenizer
