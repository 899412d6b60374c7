"""The commands a user runs, each `python -m packlm.<name>` (packlm/__init__.py maps the name).

1. `prepare.py`: train or load the tokenizer and build the token stores, before training.
2. `stats.py`: what the epoch plans do to the data (no model, no torch).
3. `evaluate.py`: score a checkpoint on validation windows or per document.
4. `generate.py`: sample text from a checkpoint.
5. `compare.py`: a sweep's runs side by side, read back from TensorBoard.
6. `trace/`: any step of a run -> the documents, spans and source records it trained on.
7. `export/`: a checkpoint or the stores in the files other libraries read.
8. `cache.py` + `cache_inventory.py`: list, remove and prune cache entries
   (`python -m packlm.cache`, whose `__main__` stays in the cache package it manages).

Training itself is `python train.py` (`packlm.train`). Each command parses its own
arguments, answers `--help` before importing torch, and reports errors in one line.
"""
