"""Parquet, Arrow / Feather files and `datasets.save_to_disk` folders -> one document per row.

The text is the `data.text_field` column, read in record batches (bounded memory per
batch) through pyarrow, an optional extra: without it the error names the extra.
A `save_to_disk` folder (state.json + Arrow stream files) is read through pyarrow too, so
Hugging Face `datasets` itself is not needed. `data.shard` may read a piece of one file:
the Parquet row groups or Arrow-file record batches that start in a byte range of it
(`table_units`), its rows numbered as in the whole file. An object in storage is read through
its seekable stream (`remote.RemoteFile.open`): Parquet fetches the footer and the text
column's pages, not the whole object.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from packlm.data.store.sources.document import Document, ReadCounts, ReadOptions, SourceError
from packlm.data.store.sources.formats import Format
from packlm.data.store.sources.remote import RemoteFile
from packlm.data.store.sources.text import check_surrogates

BATCH_ROWS = 4096


def is_dataset_folder(path: Path) -> bool:
    """A folder written by `datasets.Dataset.save_to_disk` (or a DatasetDict's)."""
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def dataset_folder_files(path: Path, key: str) -> list[Path]:
    """The Arrow files of a save_to_disk folder, in their order."""
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        raise SourceError(
            f"{key}={str(path)!r}: a DatasetDict folder; give one split, e.g. "
            + ", ".join(str(path / s) for s in splits)
        )
    try:
        state = json.loads((path / "state.json").read_text())
        return [path / f["filename"] for f in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SourceError(f"{path}/state.json: not a datasets save_to_disk state ({e})") from e


def table_documents(
    path: Path | RemoteFile, fmt: Format, prefix: str, index: int, options: ReadOptions, counts: ReadCounts,
    cut: tuple[int, int] | None = None,
) -> Iterator[Document]:  # fmt: skip
    """One document per row of the text column; ids end in the row number, in the whole
    file where `cut` = bytes [a, b) reads only the units (`table_units`) starting there."""
    if fmt.compression:
        raise SourceError(
            f"{path}: {fmt.describe()}; decompress it first (Parquet and Arrow compress inside)"
        )
    field = options.text_field
    row, units = 0, None
    if cut is not None:
        starts, rows = table_units(path, fmt)
        units = tuple(int(u) for u in np.searchsorted(starts, cut, side="left"))
        row = int(rows[: units[0]].sum())
    for batch in _batches(path, fmt, field, units):
        for value in batch.column(field).to_pylist():
            row += 1
            where = f"{path}:row {row}"
            if value is None:
                counts.empty += 1
                continue
            if not isinstance(value, str):
                raise SourceError(f"{where}: column {field!r} is {type(value).__name__}, not text")
            text = check_surrogates(value, where, options.encoding_errors, counts)
            if text:
                yield Document(text, f"{prefix}:{row}", index)
            elif text is not None:
                counts.empty += 1


def table_units(path: Path, fmt: Format) -> tuple[np.ndarray, np.ndarray] | None:
    """Where a table file can be cut without reading its rows: (the byte position where each
    Parquet row group or Arrow-file record batch starts, from its size and those of the units
    before it, scaled to the file's size; its row count), int64 [units] each; None
    for an Arrow stream or Feather v1 file (read in one piece) or a compressed file."""
    if fmt.compression or fmt.detail in ("an Arrow stream", "feather v1"):
        return None
    pa = _pyarrow(path)
    try:
        if fmt.kind == "parquet":
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
            rows = [g.num_rows for g in groups]
            sizes = [sum(g.column(c).total_compressed_size for c in range(g.num_columns))
                     for g in groups]  # fmt: skip
        else:
            with pa.memory_map(str(path)) as source:
                reader = pa.ipc.open_file(source)
                batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
                rows = [b.num_rows for b in batches]
                sizes = [b.nbytes for b in batches]  # zero-copy views of the mapped file
    except pa.ArrowException as e:
        raise SourceError(f"{path}: cannot read the {fmt.describe()} file ({e})") from e
    sizes = np.asarray(sizes, dtype=np.float64)  # [units]
    scale = path.stat().st_size / max(sizes.sum(), 1.0)
    starts = ((np.cumsum(sizes) - sizes) * scale).astype(np.int64)  # [units] nondecreasing
    return starts, np.asarray(rows, dtype=np.int64)


def _batches(
    path: Path | RemoteFile, fmt: Format, field: str, units: tuple[int, int] | None = None
):
    pa = _pyarrow(path)
    if isinstance(path, RemoteFile):
        with path.open() as f:
            yield from _read_batches(pa, f, fmt, field, path, units)
    else:
        yield from _read_batches(pa, path, fmt, field, path, units)


def _read_batches(
    pa, where, fmt: Format, field: str, path: Path | RemoteFile, units: tuple[int, int] | None
):
    """`where`: a local path or a seekable stream of the table file."""
    try:
        if fmt.kind == "parquet":
            import pyarrow.parquet as pq

            reader = pq.ParquetFile(where)
            _check_column(path, reader.schema_arrow.names, field)
            groups = None if units is None else list(range(*units))
            yield from reader.iter_batches(batch_size=BATCH_ROWS, columns=[field],
                                           row_groups=groups)  # fmt: skip
        elif fmt.detail == "feather v1":
            import pyarrow.feather as feather

            table = feather.read_table(where)
            _check_column(path, table.column_names, field)
            yield from table.select([field]).to_batches(BATCH_ROWS)
        else:
            source = (
                pa.PythonFile(where) if not isinstance(where, Path) else pa.memory_map(str(where))
            )
            with source:
                opened = pa.ipc.open_stream if fmt.detail == "an Arrow stream" else pa.ipc.open_file
                reader = opened(source)
                _check_column(path, reader.schema.names, field)
                if hasattr(reader, "num_record_batches"):
                    for i in range(*(units or (0, reader.num_record_batches))):
                        yield reader.get_batch(i)
                else:
                    yield from reader
    except pa.ArrowException as e:
        raise SourceError(f"{path}: cannot read the {fmt.describe()} file ({e})") from e


def _check_column(path: Path | RemoteFile, names: list[str], field: str) -> None:
    if field not in names:
        raise SourceError(f"{path}: no column {field!r} (data.text_field); it has {names}")


def _pyarrow(path: Path | RemoteFile):
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        raise SourceError(
            f'{path}: a Parquet/Arrow file; reading it needs pyarrow (pip install "packlm[arrow]")'
        ) from None
    return pyarrow
