"""Synthetic stores with conversations (role codes per token) whose token at position p is p,
so a batch's labels say exactly which store tokens were targets and their roles whether
they may be (the chat-mask tests of the curriculum and the plan statistics)."""

from __future__ import annotations

import numpy as np

from packlm.data.store.token_store import write_store
from packlm.tokenizer.chat import ROLE_CODES


def chat_documents(n: int, seed: int, context_first: int = 0):
    """(lengths, role codes per document: None for plain text): conversations are runs of
    markup (1) and role codes (2..5), some lengths 1 and 2 (a piece of only a BOS or of one
    token); the first `context_first` documents are conversations without an assistant token."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=n)
    lengths[rng.choice(n, size=n // 10, replace=False)] = rng.integers(1, 3, size=n // 10)
    roles = []
    for d, length in enumerate(lengths):
        if d >= context_first and rng.random() < 0.25:
            roles.append(None)  # plain text: code 0, every token supervised
            continue
        runs = np.repeat(rng.integers(1, 6, size=length), rng.integers(1, 8, size=length))
        codes = runs[:length].astype(np.uint8)
        if d < context_first:
            codes[codes == ROLE_CODES["assistant"]] = ROLE_CODES["user"]
        roles.append(codes)
    return lengths, roles


def write_chat_store(path, lengths, roles, sources=None, names=None):
    """A store whose token at position p is p, with role codes (write_position_store's);
    `sources`/`names`: each document's source index and the source names."""
    starts = np.concatenate([[0], np.cumsum(lengths)])
    docs = [np.arange(starts[i], starts[i + 1]) for i in range(len(lengths))]
    vocab = int(starts[-1]) + 2
    return write_store(
        path, docs, vocab, eos_id=vocab - 2, pad_id=vocab - 1, doc_sources=sources,
        source_names=names, roles=roles,
    )  # fmt: skip


def role_codes(lengths, roles) -> np.ndarray:
    """uint8 [n_tokens]: every store token's role code (0 for plain text)."""
    return np.concatenate(
        [np.zeros(n, np.uint8) if r is None else r for n, r in zip(lengths, roles, strict=True)]
    )
