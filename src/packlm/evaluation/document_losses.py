"""Loss per document: the table `python -m packlm.evaluate per_document=true` writes, and
the hardest validation documents a training run shows in TensorBoard.

A document's loss is the mean cross-entropy (nats) over its supervised targets, so the
rows weighted by their `supervised` add up to the split's loss exactly; a target belongs to
its input token's document (`packlm.batch`'s `document_ids`). Rows are sorted hardest
first; a document without a target (one token and no data.bos) has no loss (NaN in memory,
empty in the CSV, null in Parquet) and comes last. `document` is the store index and
`doc_id` the store's id (`source:path[:record]`), the two `python -m packlm.trace` prints,
split into `path` and `record` as it does.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np

from packlm.data.store.sources.document import parse_doc_id

COLUMNS = ("rank", "source", "document", "doc_id", "path", "record", "tokens", "supervised",
           "loss", "bpb")  # fmt: skip
"""The table's columns, in order: rank 1 is the hardest document."""


def document_table(
    store: Any,
    nats: np.ndarray,
    supervised: np.ndarray,
    n_bytes: np.ndarray,
    bos: bool = False,
    limit: int | None = None,
) -> dict[str, np.ndarray]:
    """The columns of COLUMNS, one row per store document, hardest first (the first `limit`
    rows only, if given). nats, supervised, n_bytes: [n_docs] sums over each document's
    targets (float64 or int)."""
    nats, supervised = np.asarray(nats, np.float64), np.asarray(supervised, np.float64)
    n_bytes = np.asarray(n_bytes, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.where(supervised > 0, nats / supervised, np.nan)
        bpb = np.where((supervised > 0) & (n_bytes > 0), nats / math.log(2) / n_bytes, np.nan)
    order = np.argsort(np.where(np.isnan(loss), np.inf, -loss), kind="stable")  # ties: index
    order = order[:limit]
    names = np.asarray(store.source_names, dtype=object)
    doc_ids = [store.doc_id(int(d)) for d in order]
    parsed = [parse_doc_id(i) for i in doc_ids]
    tokens = np.diff(np.asarray(store.doc_offsets)) + int(bos)  # as the plan counts them
    return {
        "rank": np.arange(1, len(order) + 1),
        "source": names[np.asarray(store.doc_sources)[order]],
        "document": order,
        "doc_id": np.asarray(doc_ids, dtype=object),
        "path": np.asarray([p["path"] for p in parsed], dtype=object),
        "record": np.asarray([p["record"] for p in parsed], dtype=object),
        "tokens": tokens[order],
        "supervised": supervised[order].astype(np.int64),
        "loss": loss[order],
        "bpb": bpb[order],
    }


def write_csv(table: dict[str, np.ndarray], path: str | Path) -> Path:
    """The table as CSV (a header row, then the rows; a missing value is empty)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = [table[c].tolist() for c in COLUMNS]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for row in zip(*columns, strict=True):
            writer.writerow(["" if _missing(v) else v for v in row])
    return path


def write_parquet(table: dict[str, np.ndarray], path: str | Path) -> Path:
    """The table as Parquet (pyarrow, the extra packlm[arrow]; ImportError without it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"source": pa.string(), "doc_id": pa.string(), "path": pa.string(),
             "loss": pa.float64(), "bpb": pa.float64()}  # fmt: skip
    columns = {
        c: pa.array(
            [None if _missing(v) else v for v in table[c].tolist()], types.get(c, pa.int64())
        )
        for c in COLUMNS
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def write_tables(table: dict[str, np.ndarray], csv_path: str | Path) -> dict[str, str | None]:
    """CSV at `csv_path`, Parquet beside it (same name, .parquet) where pyarrow is installed;
    {"csv": path, "parquet": path or None, "note": why there is no Parquet, or None}."""
    out: dict[str, str | None] = {"csv": str(write_csv(table, csv_path)), "parquet": None}
    out["note"] = None
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        out["note"] = 'no Parquet table: pyarrow is not installed (pip install "packlm[arrow]")'
        return out
    out["parquet"] = str(write_parquet(table, Path(csv_path).with_suffix(".parquet")))
    return out


WINDOWS_CAPTION = (
    "Ranked by each document's targets in the validation windows{shape}, as val/loss scores "
    "them: a document cut by a window edge is scored without its earlier part, so its rank "
    "depends on where the packing put it. `python -m packlm.evaluate ckpt_path=... "
    "per_document=true` scores every document on its own context."
)
"""What training's hardest-documents table ranks (`windows_caption`)."""


def windows_caption(window: int | None = None, packing: str | None = None) -> str:
    """The line above training's table: it ranks validation windows, not whole documents."""
    shape = f" (window {window}, stride {window}, packing {packing})" if window else ""
    return WINDOWS_CAPTION.format(shape=shape)


def hardest_markdown(
    table: dict[str, np.ndarray], n: int = 10, text_of=None, caption: str | None = None
) -> str:
    """The first `n` rows as a Markdown table (TensorBoard's Text tab), after `caption` (a
    paragraph saying what is ranked) if given; `text_of(document)` gives an excerpt of a
    document's text, shown as code."""
    head = "| rank | loss (nats) | bpb | targets | source | document | doc_id |"
    lines = [caption, ""] if caption else []
    lines += [head + (" text |" if text_of else ""), "|" + " --- |" * (7 + bool(text_of))]
    for i in range(min(n, len(table["rank"]))):
        if _missing(table["loss"][i]):
            break
        bpb = "n/a" if _missing(table["bpb"][i]) else f"{table['bpb'][i]:.3f}"
        cells = [
            str(table["rank"][i]), f"{table['loss'][i]:.4f}", bpb, str(table["supervised"][i]),
            str(table["source"][i]), str(table["document"][i]), f"`{table['doc_id'][i]}`",
        ]  # fmt: skip
        if text_of:
            excerpt = text_of(int(table["document"][i])).replace("`", "'").replace("|", "/")
            cells.append("`" + " ".join(excerpt.split()) + "`")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
