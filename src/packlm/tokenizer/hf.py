"""Export to a Hugging Face `tokenizer.json` (loadable by `tokenizers.Tokenizer.from_file`).

The pipeline mirrors packlm's: special tokens split first (HF matches added tokens
longest first too), then the pre-tokenization regex ("isolated" split), then the
byte-to-unicode map (ByteLevel without its own regex), then BPE with the merges in
order. Written as plain JSON so exporting needs no `tokenizers` install.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from packlm.tokenizer.formats import to_unicode, write_atomic


def tokenizer_json(tokenizer) -> dict:
    specials = tokenizer.special_token_ids
    vocab = {}
    for i in range(tokenizer.vocab_size):
        key = to_unicode(tokenizer.token_bytes(i))
        if i in specials.values():
            key = next(s for s, j in specials.items() if j == i)
        if key in vocab:
            raise ValueError(
                f"vocab: ids {vocab[key]} and {i} share the name {key!r}; "
                "a tokenizer.json cannot hold both"
            )
        vocab[key] = i
    added = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for s, i in sorted(specials.items(), key=lambda item: item[1])
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": tokenizer.pattern_regex},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            # "left right" strings: byte-level tokens never hold a space, every version reads it
            "merges": [f"{to_unicode(a)} {to_unicode(b)}" for a, b in tokenizer.merges],
        },
    }


def save_tokenizer_json(tokenizer, path: str | os.PathLike) -> None:
    """`path` is the .json file to write, or a directory to write tokenizer.json into."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    write_atomic(path, json.dumps(tokenizer_json(tokenizer), ensure_ascii=False))
