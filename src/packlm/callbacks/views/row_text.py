"""What the model saw: one training row decoded, documents and unsupervised spans marked.

Text `data/training_row`, logged once at the first training batch, for the row with the
most documents. Token j of the row is a target when labels[j-1] != -100; tokens that are
inputs only (the row's first token, a document's first token in `document` mode, the
token before PAD) are wrapped in «...», `⟦doc k⟧` opens document k, PAD runs are counted.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from packlm.callbacks.views.batch_images import busiest_row
from packlm.callbacks.views.tensorboard import FirstBatchView

LEGEND = "`⟦doc k⟧` document k starts · `«…»` not a target (input only) · `⟨PAD×n⟩` padding"


def marked_row(tokenizer, input_ids: torch.Tensor, labels: torch.Tensor, segment_ids) -> str:
    """Markdown of one row (int [T] each): a legend, per-document counts, the marked text."""
    ids = input_ids.cpu().numpy()
    seg = segment_ids.cpu().numpy()
    target = np.zeros(len(ids), dtype=bool)  # [T]: token j is some position's target
    target[1:] = labels.cpu().numpy()[:-1] != -100
    # spans of equal (segment, target): boundaries where either changes
    cut = np.flatnonzero((np.diff(seg) != 0) | (np.diff(target) != 0)) + 1
    pieces = []
    for a, b in zip(np.r_[0, cut], np.r_[cut, len(ids)], strict=True):
        s = int(seg[a])
        if a == 0 or s != seg[a - 1]:
            pieces.append(f"⟦doc {s}⟧" if s >= 0 else "")
        if s < 0:
            pieces.append(f"⟨PAD×{b - a}⟩")
            continue
        text = tokenizer.decode(ids[a:b].tolist())
        pieces.append(text if target[a] else f"«{text}»")
    body = "".join(pieces)
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", body)), default=0))
    docs = [d for d in np.unique(seg) if d >= 0]
    counts = "; ".join(
        f"doc {d}: {int((seg == d).sum())} tokens, {int((target & (seg == d)).sum())} targets"
        for d in docs
    )
    return f"{LEGEND}\n\n{counts}; PAD: {int((seg < 0).sum())}\n\n{fence}\n{body}\n{fence}"


class TrainingRowText(FirstBatchView):
    """Log the busiest row of the first training batch as marked text, once."""

    def __init__(self, tokenizer) -> None:
        super().__init__()
        self.tokenizer = tokenizer

    def show(self, writer, batch, step: int) -> None:
        row = busiest_row(batch["segment_ids"])
        text = marked_row(
            self.tokenizer, batch["input_ids"][row], batch["labels"][row], batch["segment_ids"][row]
        )
        writer.add_text("data/training_row", f"batch row {row}\n\n{text}", step)
