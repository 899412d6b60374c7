"""Byte-level BPE: train (`train_bpe`, `train_bpe_from_iterator`) and use (`Tokenizer`)."""

from packlm.tokenizer.pretokenize import CL100K_PATTERN, GPT2_PATTERN
from packlm.tokenizer.tokenizer import Tokenizer
from packlm.tokenizer.train import train_bpe, train_bpe_from_iterator

__all__ = ["CL100K_PATTERN", "GPT2_PATTERN", "Tokenizer", "train_bpe", "train_bpe_from_iterator"]
