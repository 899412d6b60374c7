"""Training a byte-level BPE: text -> merges.

1. `counting.py`: texts (or files, in parallel pieces) -> counts of pre-tokens, cut at
   special tokens so a special token is never merged.
2. `merge_loop.py` / `_bpe.c`: pre-token counts -> merges, the most frequent pair first
   (ties broken as the reference does); the C loop is optional and gives identical merges.
3. `bpe.py`: `train_bpe` / `train_bpe_from_iterator` wire both into a `Tokenizer`.
"""

from packlm.tokenizer.training.bpe import train_bpe, train_bpe_from_iterator

__all__ = ["train_bpe", "train_bpe_from_iterator"]
