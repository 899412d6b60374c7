"""Packing: epoch documents -> sequences, documents never cut (step 2 of the epoch plan).

1. `best_fit.py` (`data.pack_strategy=best_fit`): best-fit decreasing inside buffers of the
   epoch order; the documents of each pack are made adjacent, so packs stay intervals.
2. `ordered.py`: the packs as intervals of the (possibly reordered) epoch order: greedy
   ordered packs of `data.pack_size`, or the whole stream as one sequence.
"""

from packlm.data.epoch.packing.best_fit import best_fit_packs
from packlm.data.epoch.packing.ordered import greedy_packs, make_sequences, reorder_for_packing

__all__ = ["best_fit_packs", "greedy_packs", "make_sequences", "reorder_for_packing"]
