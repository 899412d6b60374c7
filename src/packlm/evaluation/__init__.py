"""Scores per document, shared by `python -m packlm.evaluate` and the training callbacks.

1. `document_losses.py`: the loss of every document (CSV, Parquet) and the hardest ones.
"""
