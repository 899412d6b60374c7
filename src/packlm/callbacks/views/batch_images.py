"""Show one real batch in TensorBoard: the attention mask of its busiest row and its layout.

- `Packing/attention_mask`: the row with the most documents (row 0 is usually one long
  document), each allowed (query, key) cell in its document's colour, PAD's lone diagonal
  in dark grey, masked cells white, with a legend;
- `Packing/batch_layout`: every row x position, in its document's colour where the position's
  next token is a target, half-pale where the next token is its own document's but masked
  (context: a conversation's system/user/tool turns and markup under data.chat_supervised,
  or a data.skip_documents document), pale where there is no next token to predict (its
  document ends: a boundary, the row's end), dark grey for PAD: what packing did and what
  the loss sees, readable on a white page. The last column cannot tell a masked next token
  from a boundary (the batch holds T inputs) and shows it as a boundary.
The group is `Packing` (upper case, like `Loss`): TensorBoard's Time Series sorts groups by
name, upper case first, and opens only the first two, so a run opens on `Loss` and these.
"""

from __future__ import annotations

import numpy as np
import torch

from packlm.callbacks.views.render import (
    BLANK_COLOUR,
    DOCUMENT_COLOURS,
    PAD_COLOUR,
    document_colours,
    lighten,
    new_figure,
    require_matplotlib,
    to_array,
)
from packlm.callbacks.views.tensorboard import FirstBatchView
from packlm.model.masks import allowed

LEGEND_DOCUMENTS = 9  # legend entries before "..." (colours cycle after that)
CONTEXT_WHITE = 0.4  # white mixed into a context position's colour (a boundary's: 0.7)


def busiest_row(segment_ids: torch.Tensor) -> int:
    """Index of the row with the most documents; among those, the first one with PAD."""
    seg = segment_ids.cpu().numpy()  # [B, T]
    documents = seg.max(axis=1) + 1  # segments are 0, 1, 2 ... inside a row
    has_pad = (seg < 0).any(axis=1)
    return int(np.lexsort((~has_pad, -documents))[0])


def mask_pixels(segment_ids: torch.Tensor) -> np.ndarray:
    """uint8 [T, T, 3] of one row: allowed cells in the query's document colour (PAD: grey)."""
    ok = allowed(segment_ids[None].cpu())[0].numpy()  # [T, T] bool
    colours = document_colours(segment_ids.cpu().numpy())  # [T, 3], per query
    return np.where(ok[..., None], colours[:, None, :], BLANK_COLOUR)  # [T, T, 3]


def not_targets(segment_ids: torch.Tensor, labels: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(context, boundary) bool [B, T] of the real positions with label -100: context where
    the next input is of the same document (the mask dropped its target), boundary where it
    is not (another document, PAD) or is past the row."""
    seg = segment_ids.cpu().numpy()  # [B, T]
    unsupervised = (labels.cpu().numpy() == -100) & (seg >= 0)
    same_next = np.zeros(seg.shape, dtype=bool)
    same_next[:, :-1] = seg[:, 1:] == seg[:, :-1]
    return unsupervised & same_next, unsupervised & ~same_next


def layout_pixels(segment_ids: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """uint8 [B, T, 3]: document colour where labels != -100, half-pale on context (the next
    token its document's, masked), pale at a boundary, grey for PAD."""
    colours = document_colours(segment_ids.cpu().numpy())  # [B, T, 3]
    context, boundary = not_targets(segment_ids, labels)
    colours[context] = lighten(colours[context], CONTEXT_WHITE)
    colours[boundary] = lighten(colours[boundary])
    return colours


def _legend(ax, n_documents: int, *extra: tuple[str, np.ndarray]) -> None:
    from matplotlib.patches import Patch

    shown = min(n_documents, LEGEND_DOCUMENTS)
    handles = [Patch(color=DOCUMENT_COLOURS[d] / 255, label=f"document {d}") for d in range(shown)]
    if n_documents > shown:
        handles.append(Patch(color="none", label=f"... {n_documents} documents"))
    handles += [Patch(facecolor=c / 255, edgecolor="0.6", label=name) for name, c in extra]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, frameon=False
    )


def mask_image(segment_ids: torch.Tensor, title: str = "") -> np.ndarray:
    """uint8 [H, W, 3]: the labelled attention mask of one row (segment_ids int [T])."""
    t = segment_ids.shape[0]
    n_documents = int(segment_ids.max()) + 1 if t else 0
    fig = new_figure(7.5, 5.6)
    ax = fig.add_axes((0.1, 0.1, 0.6, 0.8))
    ax.imshow(mask_pixels(segment_ids), interpolation="nearest")
    ax.set(xlabel="key position", ylabel="query position")
    ax.set_title(title or f"attention mask: {n_documents} documents in a row of {t}", fontsize=10)
    _legend(
        ax,
        n_documents,
        ("PAD: attends to itself only", PAD_COLOUR),
        ("masked", BLANK_COLOUR),
    )
    return to_array(fig)


def layout_image(segment_ids: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """uint8 [H, W, 3]: the whole batch, row x position (segment_ids, labels int [B, T])."""
    b, t = segment_ids.shape
    pixels = layout_pixels(segment_ids, labels)
    fig = new_figure(9.0, min(2.2 + 0.22 * b, 12.0))
    ax = fig.add_axes((0.08, 0.2, 0.68, 0.68))
    ax.imshow(pixels, interpolation="nearest", aspect="auto")
    ax.hlines(np.arange(b - 1) + 0.5, -0.5, t - 0.5, colors="white", linewidth=1)  # row gaps
    ax.set_yticks(range(0, b, max(1, b // 16)))
    ax.set(xlabel="position in the window", ylabel="batch row")
    supervised = int((labels != -100).sum())
    context = int(not_targets(segment_ids, labels)[0].sum())
    masked = f", {context} context (masked)" if context else ""
    ax.set_title(
        f"batch layout: {b} rows x {t}, {supervised} supervised targets{masked}", fontsize=10
    )
    n_documents = int(segment_ids.max()) + 1 if segment_ids.numel() else 0
    shades = [("next token masked: context", lighten(DOCUMENT_COLOURS[0], CONTEXT_WHITE))]
    _legend(
        ax,
        n_documents,
        *(shades if context else []),
        ("no next token: document end", lighten(DOCUMENT_COLOURS[0])),
        ("PAD", PAD_COLOUR),
    )
    return to_array(fig)


class BatchImages(FirstBatchView):
    """Log the first training batch's mask (busiest row) and layout once, at the start."""

    def __init__(self) -> None:
        require_matplotlib()
        super().__init__()

    def show(self, writer, batch, step: int) -> None:
        seg, labels = batch["segment_ids"], batch["labels"]
        row = busiest_row(seg)
        title = f"attention mask of batch row {row}: {int(seg[row].max()) + 1} documents"
        writer.add_image(
            "Packing/attention_mask", mask_image(seg[row], title), step, dataformats="HWC"
        )
        writer.add_image("Packing/batch_layout", layout_image(seg, labels), step, dataformats="HWC")
