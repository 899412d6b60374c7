"""Byte-level BPE: text <-> ids, trained on the corpus or loaded from files.

1. `packlm.config.tokenizer`: the `tokenizer` config group (vocab size, special tokens, pattern, path).
2. `pretokenize.py`: text -> pre-tokens by the GPT-2 style regex (with `regex`), cut at
   special tokens, which are never merged.
3. `training/`: pre-token counts -> merges (C loop, Python fallback) -> a `Tokenizer`.
4. `tokenizer.py` + `encoder.py` + `tiktoken_engine.py`: `Tokenizer` encodes (through tiktoken
   with packlm's merges when installed and checked equivalent, else the Python encoder: the
   same ids) and decodes; `engine_pattern.py` gives tiktoken the pattern `regex` splits by.
5. `formats.py` / `hf.py`: GPT-2's vocab.json + merges.txt, packlm's saved directory, .tiktoken
   ranks, Hugging Face tokenizer.json (export and import); `obtain.load_path` picks the reader
   for `tokenizer.path`. One grammar, in Python: strict JSON and "left right" lines; a bad
   file is one short error naming it and quoting at most a prefix of the bad entry.
6. `obtain.py`: `get_tokenizer` -> `tokenizer.path`, or the tokenizer trained on the training
   documents, cached under `<cache_dir>/tokenizers/<digest>`; `tables.py`: `with_tables` keeps
   what loading files derives under `<cache_dir>/tokenizers/tables/<sha256 of the files>.npz`.
"""

from packlm.tokenizer.pretokenize import CL100K_PATTERN, GPT2_PATTERN
from packlm.tokenizer.tokenizer import Tokenizer
from packlm.tokenizer.training.bpe import train_bpe, train_bpe_from_iterator

__all__ = ["CL100K_PATTERN", "GPT2_PATTERN", "Tokenizer", "train_bpe", "train_bpe_from_iterator"]
