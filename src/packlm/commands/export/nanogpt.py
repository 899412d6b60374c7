"""`format=nanogpt`: train.bin / val.bin / meta.pkl, as nanoGPT's data/<dataset>/ folders.

A packlm token store's tokens.bin already is nanoGPT's layout: every document's ids back to
back, headerless, EOS after each document, uint16 while the vocabulary fits in 65,536 ids.
So the export is a copy. Above 65,536 ids the files are uint32: nanoGPT's train.py reads
uint16 (`np.memmap(..., dtype=np.uint16)` in get_batch), so change that line to
`dtype=meta["dtype"]` (meta.pkl says which; a note is printed).

meta.pkl holds `vocab_size` (nanoGPT's train.py sizes the model with it), the dtype, the
EOS/PAD ids, packlm's tokenizer state (plain data) and `itos`/`stoi`: nanoGPT's sample.py
reads those as a character-level vocabulary, which works for tokens that are whole
characters; `Tokenizer(**meta["packlm_tokenizer"])` is the real one.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from packlm.data.store.token_store import TOKENS_FILE, TokenStore

META_FILE = "meta.pkl"


def meta(tokenizer, dtype: np.dtype, eos_id: int, pad_id: int) -> dict[str, Any]:
    itos = {i: tokenizer.decode([i]) for i in range(tokenizer.vocab_size)}
    single = (
        i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_token_ids.values()
    )
    stoi = {itos[i]: i for i in single if len(itos[i]) == 1 and itos[i] != "\ufffd"}
    return {
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "eos_id": eos_id,
        "pad_id": pad_id,
        "itos": itos,
        "stoi": stoi,
        "packlm_tokenizer": tokenizer.__getstate__(),
    }


def export_nanogpt(stores: dict[str, TokenStore], tokenizer, out: Path) -> list[str]:
    """Copy each split's tokens to `<split>.bin` (train, val); returns notes for the user."""
    dtypes = {np.dtype(s.manifest["dtype"]) for s in stores.values()}
    if len(dtypes) != 1:
        raise ValueError(f"the splits' stores have different dtypes {sorted(map(str, dtypes))}")
    (dtype,) = dtypes
    notes = []
    for split, store in stores.items():
        dest = out / f"{split}.bin"
        if store.n_tokens:
            with open(dest, "wb") as out_file:
                for part in getattr(store, "parts", [store]):  # data.shards: shard by shard
                    with open(part.path / TOKENS_FILE, "rb") as f:
                        shutil.copyfileobj(f, out_file)
        else:
            dest.touch()
            notes.append(f"{split}.bin is empty: the {split} split has no documents")
    if dtype != np.uint16:
        notes.append(
            f"the vocabulary ({tokenizer.vocab_size} ids) needs {dtype.name}: in nanoGPT's "
            "train.py get_batch, read the .bin files with dtype=np.uint32 instead of np.uint16"
        )
    train = stores["train"]
    with open(out / META_FILE, "wb") as f:
        pickle.dump(meta(tokenizer, dtype, train.eos_id, train.pad_id), f)
    return notes
