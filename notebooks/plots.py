"""The drawing code of the notebooks, kept here so each notebook shows its explanation, the
computation and the picture, not forty lines of matplotlib between them.

The notebooks import it as `plots` (Jupyter starts their kernel in this folder). It only
draws what a notebook computed with packlm; nothing here changes a value.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from packlm.model.masks import allowed

WINDOW_COLOURS = {"window": "tab:blue", "tail": "tab:orange", "short": "tab:green"}


def draw_windows(ax, plan, names: list[str]) -> None:
    """One row per document of `plan` (grey bar, its length) with the windows above it in two
    lanes (so neighbours do not hide each other), their padded part hatched, and a triangle at
    the document's random offset. x is the token position in the document."""
    ids = np.arange(plan.n_samples)
    seq, g, r = plan.windows(ids)  # document, stream start and tokens read of every sample
    start, length, _, full = plan.layout(seq)  # the layout of each sample's document
    k = ids - plan.window_cum[seq]  # window index inside its document
    t1 = plan.window + 1  # tokens a sample reads
    kind = np.where(length < t1, "short", np.where(k >= full, "tail", "window"))
    for d in range(plan.n_sequences):
        ax.barh(-d, plan.doc_lengths[d], height=0.2, color="0.75")
    for i in ids:
        y = -seq[i] + 0.25 + 0.2 * (k[i] % 2)
        colour = WINDOW_COLOURS[kind[i]]
        left = g[i] - start[i]
        ax.barh(y, r[i], left=left, height=0.15, color=colour)
        if r[i] < t1:  # the padded part of the sample
            ax.barh(y, t1 - r[i], left=left + r[i], height=0.15, color="white",
                    edgecolor=colour, hatch="////")  # fmt: skip
    rows = np.arange(plan.n_sequences)
    _, _, offsets, full_per_doc = plan.layout(rows)
    has = full_per_doc > 0
    ax.scatter(offsets[has], -rows[has] - 0.2, marker="^", color="k", s=25, zorder=3)
    ax.set_yticks(-rows, names)


def window_legend(fig) -> None:
    """The legend of draw_windows, under the figure."""
    patch = {
        "document": plt.Rectangle((0, 0), 1, 1, color="0.75"),
        "window (T+1 tokens)": plt.Rectangle((0, 0), 1, 1, color=WINDOW_COLOURS["window"]),
        "tail window": plt.Rectangle((0, 0), 1, 1, color=WINDOW_COLOURS["tail"]),
        "short document: one sample": plt.Rectangle((0, 0), 1, 1, color=WINDOW_COLOURS["short"]),
        "padding": plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="k", hatch="////"),
        "offset": plt.Line2D([], [], marker="^", color="k", linestyle=""),
    }
    fig.legend(patch.values(), patch.keys(), loc="lower center", ncol=len(patch))


def fullest_row(segment_ids) -> int:
    """The row a figure shows: the most documents; among those, one with padding, then the
    most tokens."""

    def score(r):
        seg = segment_ids[r]
        return int(seg.max()), bool((seg < 0).any()), int((seg >= 0).sum())

    return max(range(len(segment_ids)), key=score)


def draw_batch(axes, name: str, batch) -> None:
    """Four panels of one batch: the fullest row's attention mask, then segment_ids,
    position_ids and the supervised targets of every row (x: position in the row)."""
    seg = batch["segment_ids"]  # int32 [B, T], -1 on PAD
    r = fullest_row(seg)
    axes[0].imshow(allowed(seg[r : r + 1])[0], cmap="gray", interpolation="nearest")
    axes[0].set(title=f"{name}\nmask of row {r}", xlabel="key", ylabel="query")
    n_colours = int(seg.max()) + 1  # one colour per segment id, so none is clipped or repeated
    cmap = plt.get_cmap("viridis", n_colours).with_extremes(bad="black")
    shown = axes[1].imshow(np.ma.masked_less(seg.numpy(), 0), cmap=cmap, vmin=-0.5,
                           vmax=n_colours - 0.5, interpolation="nearest", aspect="auto")  # fmt: skip
    colourbar = axes[1].figure.colorbar(shown, ax=axes[1])
    colourbar.set_ticks(range(0, n_colours, max(1, n_colours // 8)))
    axes[1].set(title="segment_ids (PAD black)", xlabel="position in row", ylabel="row")
    shown = axes[2].imshow(batch["position_ids"], cmap="viridis", interpolation="nearest",
                           aspect="auto")  # fmt: skip
    axes[2].figure.colorbar(shown, ax=axes[2])
    axes[2].set(title="position_ids", xlabel="position in row")
    axes[3].imshow(batch["labels"] != -100, cmap="gray", vmin=0, vmax=1,
                   interpolation="nearest", aspect="auto")  # fmt: skip
    axes[3].set(title="supervised targets (white)", xlabel="position in row")
