"""packlm: how text becomes training samples for a causal language model, done exactly.

The top level is the architecture, read top-down (each folder imports only the ones below it):

1. `commands/`: what a user runs: `python -m packlm.<name>` for prepare, stats, evaluate,
   generate, compare, trace, export (and `python -m packlm.cache`); `train.py` runs `train/`.
2. `train/`: `train(cfg)` composes the Trainer, the DataModule and the module, and runs them.
3. `callbacks/`: what a run does beside the step: budgets, metrics, TensorBoard views, stops.
4. `evaluation/`: the loss of each document, as evaluate and the callbacks report it.
5. `checkpoint/`: the checkpoint's format: what packlm adds, loading it, checking a resume.
6. `data/`, `model/`, `tokenizer/`: the data path (sources -> store -> epoch plans -> batches),
   the Transformer and its loss, byte-level BPE.
7. `config/`: every config group as a dataclass (keys, defaults, validation), the Hydra schema,
   `--help`, the Trainer's arguments; no torch, no Lightning, so a bad override fails at once.
8. `cache/`: cache entries shared by the tokenizer and the stores (fingerprints, locks).
9. `runtime/`: how packlm's processes run: worker processes, the run folder, the one shim over
   private library names.
10. `batch.py`, `errors.py`: the shared contracts: what a batch holds, how errors are reported.
"""

import os as _os
import sys as _sys

if _sys.argv[:1] == ["-m"]:  # `python -m packlm.<command>` (argv[0] while runpy finds it)
    from packlm.runtime.interrupt import quiet_ctrl_c as _quiet_ctrl_c

    _quiet_ctrl_c()  # a Ctrl-C during the command's imports: one line, no traceback

__version__ = "0.1.0"

# `python -m packlm.prepare` and the other command names stay short and public, while the
# modules live in commands/: that folder is searched after this one for `packlm.<name>`, so
# the top level holds no second file per command. Code imports `packlm.commands.<name>`.
__path__.append(_os.path.join(_os.path.dirname(__file__), "commands"))
