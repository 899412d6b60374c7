"""Matplotlib figures as TensorBoard images: the shared palette and figure -> RGB array.

Every picture of the data path uses the same colours, so a document, PAD and a masked cell
look the same in the mask, the batch layout and the legend. Rendering uses the Agg
backend and never opens a window. matplotlib is imported only to draw: without it,
`packlm.callbacks` still imports and `require_matplotlib` names the fix before training.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Documents cycle through tab10 without its grey (kept for PAD); written as uint8 RGB.
DOCUMENT_COLOURS = np.array(
    [
        [31, 119, 180],
        [255, 127, 14],
        [44, 160, 44],
        [214, 39, 40],
        [148, 103, 189],
        [140, 86, 75],
        [227, 119, 194],
        [188, 189, 34],
        [23, 190, 207],
    ],
    dtype=np.uint8,
)
PAD_COLOUR = np.array([64, 64, 64], dtype=np.uint8)  # dark grey, distinct from every document
BLANK_COLOUR = np.array([255, 255, 255], dtype=np.uint8)  # masked cell / page


def document_colours(segment_ids: np.ndarray) -> np.ndarray:
    """uint8 [..., 3] colour of each position: its document's, PAD_COLOUR where segment < 0."""
    seg = np.asarray(segment_ids)
    colours = DOCUMENT_COLOURS[np.mod(seg, len(DOCUMENT_COLOURS))]
    colours[seg < 0] = PAD_COLOUR
    return colours


def lighten(colours: np.ndarray, amount: float = 0.7) -> np.ndarray:
    """The colours mixed with white (unsupervised positions in the layout)."""
    mixed = colours.astype(np.float64) * (1 - amount) + 255 * amount
    return np.round(mixed).astype(np.uint8)


def require_matplotlib() -> None:
    """Raise a clear ImportError when matplotlib is missing (called when a picture callback
    is created, so the run fails before any work)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "the TensorBoard pictures (train.log_batch_images) need matplotlib: "
            "pip install matplotlib, or run with train.log_batch_images=false"
        ) from e


def new_figure(width: float, height: float) -> Any:
    """A matplotlib Figure bound to an Agg canvas (no pyplot state, safe in any thread)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def to_array(fig: Any) -> np.ndarray:
    """uint8 [H, W, 3] RGB pixels of the drawn figure."""
    canvas = fig.canvas
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
