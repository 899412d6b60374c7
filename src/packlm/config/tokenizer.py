"""The `tokenizer` config group as a dataclass, validated before any work starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from packlm.config.group import ConfigGroup, check_positive_int
from packlm.errors import ConfigError


@dataclass
class TokenizerConfig(ConfigGroup):
    group: ClassVar[str] = "tokenizer"

    vocab_size: int = 4096
    """Total vocabulary: special tokens + 256 bytes + merges."""
    special_tokens: list[str] = field(default_factory=lambda: ["<|endoftext|>", "<|pad|>"])
    """Never merged, never split. The first is EOS (ends every document); "<|pad|>" is PAD."""
    pattern: str = "gpt2"
    """Pre-tokenization regex: "gpt2", "cl100k", or a regex string."""
    sample_bytes: int | None = None
    """Train on the first this many UTF-8 bytes of the training split's texts, in reading
    order (the document reaching it cut there; the log says the bytes and documents used, of
    the split's estimated size); null: all of it. Part of the tokenizer's cache key."""
    path: str | None = None
    """Load the tokenizer from here instead of training one: a packlm tokenizer directory, a folder
    with GPT-2 style vocab.json + merges.txt, a Hugging Face tokenizer.json (or its folder), or a
    .tiktoken file; files without special tokens or pattern take tokenizer.special_tokens / pattern."""

    def validate(self) -> TokenizerConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        if len(set(self.special_tokens)) != len(self.special_tokens):
            raise ConfigError(f"tokenizer.special_tokens={list(self.special_tokens)}: duplicates")
        if any(not s for s in self.special_tokens):
            raise ConfigError("tokenizer.special_tokens: empty string")
        from packlm.tokenizer.pretokenize import resolve_pattern

        try:
            resolve_pattern(self.pattern)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"tokenizer.pattern={self.pattern!r}: {e}") from None
        if self.sample_bytes is not None:
            check_positive_int("tokenizer.sample_bytes", self.sample_bytes)
        if self.path is None:
            minimum = 256 + len(self.special_tokens)
            if not isinstance(self.vocab_size, int) or self.vocab_size < minimum:
                raise ConfigError(
                    f"tokenizer.vocab_size={self.vocab_size}: must be at least 256 bytes + "
                    f"{len(self.special_tokens)} special tokens = {minimum}"
                )
        return self
