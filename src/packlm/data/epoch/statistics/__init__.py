"""What an epoch plan does to the data, from the plan (`python -m packlm.stats`).

1. `coverage.py`: sweeps over window edges -> how many times each stream position is a
   target (histograms, per-document integrals), in memory per document, not per sample.
2. `attention_work.py`: the allowed (query, key) pairs of the samples' block-diagonal masks
   against a dense causal mask's.
3. `chat_targets.py`: on a store with conversations, the targets the chat mask keeps (the
   one count that reads the store: its role codes, a bounded chunk of samples at a time).
4. `summary.py`: `plan_statistics` -> one dict (fill, target multiplicity, overlap, window
   starts on boundaries, attention work, per source); `to_json` for printing.
"""

from packlm.data.epoch.statistics.coverage import Coverage, Histogram
from packlm.data.epoch.statistics.summary import plan_statistics, to_json

__all__ = ["Coverage", "Histogram", "plan_statistics", "to_json"]
