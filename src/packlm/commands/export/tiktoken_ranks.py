"""`format=tiktoken`: the `.tiktoken` ranks file plus the pattern and special tokens.

A `.tiktoken` file is what tiktoken ships its own encodings as: one line per ordinary
token, "base64(token bytes) rank", the rank being the id. tiktoken has no file for the
pattern and the special tokens, so they go to tiktoken_config.json, whose keys are the
keyword arguments of `tiktoken.Encoding`:

    ranks = tiktoken.load.load_tiktoken_bpe("out/tokenizer.tiktoken")
    config = json.load(open("out/tiktoken_config.json"))
    enc = tiktoken.Encoding(mergeable_ranks=ranks, **config)
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from packlm.tokenizer.formats import write_atomic

RANKS_FILE = "tokenizer.tiktoken"
CONFIG_FILE = "tiktoken_config.json"


def export_tiktoken(tokenizer, out: Path) -> None:
    """Write the ranks and the config into the (temporary) folder `out`; an error when no
    tiktoken Encoding gives this tokenizer's ids (see `Tokenizer.to_tiktoken`)."""
    encoding = tokenizer.to_tiktoken()  # checks equivalence and that tiktoken compiles the pattern
    specials = set(tokenizer.special_token_ids.values())
    ranks = {tokenizer.token_bytes(i): i for i in range(tokenizer.vocab_size) if i not in specials}
    lines = [f"{base64.b64encode(t).decode('ascii')} {i}" for t, i in ranks.items()]
    write_atomic(out / RANKS_FILE, "\n".join(lines) + "\n")
    config = {
        "name": encoding.name,
        "pat_str": encoding._pat_str,  # the pattern with its classes set for tiktoken's tables
        "special_tokens": dict(tokenizer.special_token_ids),
        "explicit_n_vocab": tokenizer.vocab_size,
    }
    write_atomic(out / CONFIG_FILE, json.dumps(config, ensure_ascii=False, indent=2) + "\n")
