"""Each epoch's plan, readable: a markdown table in the Text tab and a coverage picture.

The DataModule logs the few statistics worth a line over epochs (`data/*` scalars at the
global step where the epoch starts) and the histograms; this callback adds what a chart
of single dots cannot show:
- Text `data/epoch_statistics`: a column per epoch seen by this run (the last 8), a row per
  statistic (samples, windows per sequence, fill, supervised ratio, target multiplicity
  mean / never, overlap, windows on a boundary, attention useful fraction ...), then the
  current epoch's per-source counts;
- Images `Packing/coverage`: along a stretch of the epoch's stream, how many windows target
  each token, where windows start, where documents start.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.utilities import rank_zero_only

from packlm.callbacks.views.render import DOCUMENT_COLOURS, new_figure, require_matplotlib, to_array
from packlm.callbacks.views.tensorboard import tensorboard_logger

EPOCHS_SHOWN = 8  # columns of the table; the data/* scalars hold every epoch
COLUMNS = (  # (statistic, row name, format)
    ("samples", "samples", "{:,}"),
    ("windows_per_sequence", "windows per sequence", "{:.2f}"),
    ("fill_ratio", "fill (non-PAD / input)", "{:.3f}"),
    ("supervised_ratio", "supervised ratio (targets / input)", "{:.3f}"),
    ("supervised_tokens", "supervised tokens", "{:,}"),
    ("target_multiplicity_mean", "times a token is a target (mean)", "{:.2f}"),
    ("never_target_fraction", "tokens never a target", "{:.3f}"),
    ("overlap_ratio", "overlap (repeated targets / targets)", "{:.3f}"),
    ("padded_samples", "padded samples", "{:,}"),
    ("tail_windows", "tail windows", "{:,}"),
    ("window_start_at_document_start", "windows starting at a document start", "{:.3f}"),
    ("window_starts_on_boundary", "windows starting on a boundary (document/paragraph)", "{:.3f}"),
    ("attention_useful_fraction", "attention useful (allowed / dense causal pairs)", "{:.3f}"),
)
SOURCE_COLUMNS = (
    ("samples", "samples", "{:,}"),
    ("sample_fraction", "sample fraction", "{:.3f}"),
    ("stream_tokens", "stream tokens", "{:,}"),
    ("supervised_tokens", "supervised tokens", "{:,}"),
)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def epoch_table(rows: list[tuple[int, dict[str, Any]]], last: int = EPOCHS_SHOWN) -> str:
    """Markdown: a column per epoch (the `last` ones) of (global step, statistics) rows,
    a row per statistic; then the latest epoch's sources."""
    rows = rows[-last:]
    if not rows:
        return ""
    head = ["", *(f"epoch {stats['epoch']}" for _, stats in rows)]
    lines = [_row(head), _row(["---"] * len(head))]
    lines.append(_row(["global step", *(str(step) for step, _ in rows)]))
    for key, name, fmt in COLUMNS:
        lines.append(_row([name, *(fmt.format(stats[key]) for _, stats in rows)]))
    _, stats = rows[-1]
    lines.insert(
        0,
        f"window {stats['window']}, stride {stats['stride']}: {stats['documents']:,} documents, "
        f"{stats['stream_tokens']:,} tokens in the epoch stream, sequences: {stats['sequences']:,}\n",
    )
    sources = stats.get("sources") or {}
    if sources:
        head = ["source", *(h for _, h, _ in SOURCE_COLUMNS)]
        lines += ["", f"**epoch {stats['epoch']} per source**", "", _row(head)]
        lines.append(_row(["---"] * len(head)))
        for name, counts in sources.items():
            cells = [f"`{name}`"] + [fmt.format(counts[k]) for k, _, fmt in SOURCE_COLUMNS]
            lines.append(_row(cells))
    return "\n".join(lines)


def coverage(plan: Any, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over stream positions [0, n): (windows targeting each position int64 [n], window
    starts, document starts), sorted."""
    g, r = _windows_before(plan, n)  # stream start, tokens read
    edges = np.zeros(n + 1, dtype=np.int64)  # window targets stream positions [g+1, g+r)
    np.add.at(edges, np.minimum(g + 1, n), 1)
    np.add.at(edges, np.minimum(g + r, n), -1)
    count = np.cumsum(edges[:-1])  # [n]
    last_doc = int(plan.locate(np.array([n - 1]))[0]) if n else -1
    doc_starts = plan.doc_start(np.arange(last_doc + 1))  # the documents of the stretch
    if plan.packing != "stream":  # a document's first token is never a target there
        count[doc_starts[doc_starts < n]] = 0
    return count, np.sort(g), doc_starts


def coverage_image(plan: Any, max_tokens: int | None = None) -> np.ndarray:
    """uint8 [H, W, 3]: target count of each token over the first stretch of the stream."""
    t, stride = plan.window, plan.stride
    n = min(plan.n_tokens, max_tokens or max(6 * max(t, stride), 4 * (t + 1)))
    count, starts, doc_starts = coverage(plan, n)
    x = np.arange(n)

    fig = new_figure(9.0, 3.5)
    ax = fig.add_axes((0.08, 0.3, 0.9, 0.6))
    ax.step(x, count, where="post", color=DOCUMENT_COLOURS[0] / 255, label="times a target")
    top = max(int(count.max()) if n else 0, 1) + 1
    ax.vlines(
        doc_starts, 0, top, colors="0.55", linestyles=":", linewidth=1, label="document start"
    )
    ax.plot(
        starts, np.full(len(starts), top - 0.3), "v", color=DOCUMENT_COLOURS[1] / 255,
        markersize=4, linestyle="none", label="window start",
    )  # fmt: skip
    ax.set(xlim=(0, max(n, 1)), ylim=(0, top + 0.2), xlabel="token position in the epoch stream")
    ax.set_ylabel("windows targeting it")
    ax.set_yticks(range(top))
    ax.set_title(
        f"epoch {plan.epoch}: first {n:,} of {plan.n_tokens:,} tokens "
        f"(window {t}, stride {stride}, packing {plan.packing})",
        fontsize=10,
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, ncol=3, frameon=False)
    return to_array(fig)


def _windows_before(plan: Any, n: int, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(stream start, tokens read) of the windows starting before position n: in plan order
    (sample ids before the shuffle) windows follow the stream, so they are a prefix."""
    starts, reads = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for a in range(0, plan.n_samples, chunk):
        _, g, r = plan.windows(np.arange(a, min(a + chunk, plan.n_samples)))
        starts.append(g[g < n])
        reads.append(r[g < n])
        if len(g) and g.min() >= n:
            break
    return np.concatenate(starts), np.concatenate(reads)


class EpochStatistics(L.Callback):
    """Write the epoch table and (`images`) the coverage image when each epoch starts."""

    def __init__(self, datamodule: Any, images: bool = True):
        if images:
            require_matplotlib()
        self.datamodule = datamodule
        self.images = images  # the coverage image (train.log_batch_images)
        self.rows: list[tuple[int, dict[str, Any]]] = []  # (global step, statistics)

    @rank_zero_only
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = tensorboard_logger(trainer)
        if logger is None:
            return
        epoch, step = trainer.current_epoch, trainer.global_step
        if any(stats["epoch"] == epoch for _, stats in self.rows):
            return
        stats = self.datamodule.plan_statistics(epoch)
        stats = {k: v for k, v in stats.items() if k != "histograms"}  # those go to Histograms
        self.rows = [*self.rows, (step, stats)][-EPOCHS_SHOWN:]
        writer = logger.experiment
        writer.add_text("data/epoch_statistics", epoch_table(self.rows), step)
        if self.images:
            plan = self.datamodule.plan(epoch)
            writer.add_image("Packing/coverage", coverage_image(plan), step, dataformats="HWC")
