"""`python -m packlm.evaluate ckpt_path=<ckpt> [data.val_sources=[<files>]]`: score a checkpoint.

What is scored (`packlm.evaluation.scored_data`): the files of data.val_sources, read by the
same source readers as training and encoded with the checkpoint's own tokenizer; without
them, the run's own validation split as the checkpoint records it. One stderr line says
which. Window, packing and the reader options are the checkpoint's unless given
(data.window=..., data.packing=...).

Two meanings of the loss, and a stderr line says which one is reported:
- default: the validation windows of DESIGN.md (stride = window, no offset, tail = pad, the
  run's packing): every token a target once, but a document cut by a window edge is scored
  without its earlier part as context. The same number as training's val/loss.
- `per_document=true`: every document on its own context (`packlm.evaluation.
  document_windows`: whole when it fits the window, else rolling windows
  `per_document_stride` apart, default half the window), and the loss of every document,
  hardest first (`packlm.evaluation.document_losses`): a CSV at `per_document_path`
  (default `per_document.csv` in the checkpoint's run folder) and a Parquet table beside it
  where pyarrow is installed; the JSON names both (`per_document`). Its `loss`/`bpb` are
  the rows weighted by their supervised targets.

Prints JSON: loss (nats per supervised token), ppl, bits per byte and the token counts,
after a progress bar and the same figures as a table on stderr.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue
from tqdm import tqdm  # not tqdm.auto: in Jupyter without ipywidgets it warns at import

from packlm.config.help import exit_if_help
from packlm.config.precheck import precheck
from packlm.config.schema import CONFIG_DIR
from packlm.data.store.token_store import StoreError
from packlm.errors import ConfigError, one_line_errors
from packlm.evaluation.scored_data import missing_sources, scored_data

DEFAULT_TABLE = "per_document.csv"


def table_path(
    per_document: bool, path: str | None, ckpt_path: str | Path | None = None
) -> Path | None:
    """Where the per-document CSV goes (None: no table); a given path turns the table on.
    By default `per_document.csv` in the run folder of `ckpt_path` (`<run>/checkpoints/x.ckpt`
    -> `<run>`), beside what the run wrote, not in the working directory (a repository)."""
    if not per_document and not path:
        return None
    if path:
        path = Path(path)
    elif ckpt_path is not None:
        from packlm.checkpoint.contents import run_dir_of  # torch: not for --help

        path = run_dir_of(Path(ckpt_path)) / DEFAULT_TABLE
    else:
        path = Path(DEFAULT_TABLE)
    if path.suffix == ".parquet":
        raise ConfigError(
            f"per_document_path={path}: names the CSV (the Parquet table goes beside it, with "
            f"the suffix .parquet); give a .csv path such as {path.with_suffix('.csv')}"
        )
    return path


class Scoring(NamedTuple):
    """What a pass needs: the data that is scored, its store and module, the model."""

    scored: Any  # packlm.evaluation.scored_data.ScoredData
    data: Any  # its DataConfig, validated against the model
    dm: Any  # a PackedDataModule whose "val" store is the scored documents
    model: Any  # the checkpoint's Transformer, on the device, in eval mode
    byte_lengths: Any  # int [V] UTF-8 bytes of each token id, on the device
    stride: int | None  # per_document_stride (None: the validation windows)

    @property
    def store(self):
        return self.dm.store("val")

    def loader(self):
        """The validation windows, or (stride) every document on its own context."""
        if self.stride is None:
            return self.dm.val_dataloader()
        return document_batches(self.store, self.data, self.stride)


def open_scoring(ckpt_path: str | Path, data_overrides: dict[str, Any], cache_dir: str | Path,
                 device: str = "cpu", per_document: bool = False,
                 per_document_stride: int | None = None) -> Scoring:  # fmt: skip
    """Read the checkpoint, prepare (or reuse) the store of what is scored, build the model;
    per_document_stride is checked before the store is prepared."""
    import torch  # not for `--help`

    from packlm.checkpoint.load import load_checkpoint, tokenizer_config_of
    from packlm.data.datamodule import PackedDataModule
    from packlm.data.store.prepared import prepare_stores
    from packlm.model.transformer import Transformer

    ckpt = load_checkpoint(ckpt_path)
    scored = scored_data(ckpt.data, data_overrides)
    data = scored.data.validate(ckpt.model.context_length)
    stride = document_stride(per_document_stride, data.window) if per_document else None
    tokenizer_cfg = tokenizer_config_of(ckpt.tokenizer, cache_dir)
    try:
        prepared = prepare_stores(data, tokenizer_cfg, cache_dir, progress=False)
    except ValueError as e:  # ConfigError, SourceError: name the key the user typed
        raise missing_sources(e, scored) from None
    if not scored.own_split:  # the given files are the "train" store (val_fraction 0)
        prepared = replace(
            prepared, val_dir=prepared.train_dir, val_manifest=prepared.train_manifest
        )
    dm = PackedDataModule(tokenizer_cfg, cache_dir, ckpt.model.context_length, data=data,
                          prepared=prepared, progress=False)  # fmt: skip
    if dm.store("val").n_docs == 0:
        raise ConfigError(f"data.val_sources: {scored.says}: no documents to score")
    model = Transformer(ckpt.model)
    model.load_state_dict(ckpt.weights)
    model.to(device).eval()
    byte_lengths = torch.as_tensor(ckpt.tokenizer.token_byte_lengths(), device=device)  # [V]
    return Scoring(scored, data, dm, model, byte_lengths, stride)


def evaluate(ckpt_path: str | Path, data_overrides: dict[str, Any], cache_dir: str | Path,
             device: str = "cpu", progress: bool = False,
             per_document_path: str | Path | None = None, per_document_stride: int | None = None,
             say: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """The JSON result. With `per_document_path`: every document scored on its own context
    (`packlm.evaluation.document_windows`, rolling windows `per_document_stride` apart, None:
    half the window) and the per-document tables written there; without: the validation
    windows. `say(line)` hears which data and which of the two meanings, before the pass."""
    import torch  # not for `--help`

    from packlm.model.source_loss import GroupTotals

    say = say or (lambda line: None)
    with torch.no_grad():
        run = open_scoring(ckpt_path, data_overrides, cache_dir, device,
                           per_document_path is not None, per_document_stride)  # fmt: skip
        scored, data, store, stride = run.scored, run.data, run.store, run.stride
        say(scored.says)
        say(meaning(data, stride))
        by_document = GroupTotals(store.n_docs) if per_document_path else None
        nats, supervised, n_bytes, rows = score(
            run.model, run.loader(), run.byte_lengths, by_document, device, progress
        )
        if supervised == 0:
            raise ValueError(f"{scored.says}: no token to score")
        loss = nats / supervised
        result = {
            "ckpt_path": str(ckpt_path),
            "scored": scored.says,
            "sources": list(map(str, (scored.own_split and data.val_sources) or data.sources)),
            "split": "the run's validation split" if scored.own_split else "all of the files",
            "scoring": "documents" if stride else "validation windows",
            "loss": loss,
            "ppl": math.exp(min(loss, 700.0)),
            "bpb": nats / math.log(2) / n_bytes if n_bytes else None,
            "documents": store.n_docs,
            "tokens": store.n_tokens,
            "supervised_tokens": supervised,
            "bytes": n_bytes,
            "windows": rows,
            "window": data.window,
            "packing": data.packing,
        }
        if stride is not None:
            result["per_document_stride"] = stride
            result["per_document"] = _write_table(by_document, store, data.bos, per_document_path)
        return result


def document_stride(stride: int | None, window: int) -> int:
    """per_document_stride, checked (None: half the window)."""
    if stride is None:
        return max(window // 2, 1)
    if not isinstance(stride, int) or not 1 <= stride <= window:
        raise ConfigError(f"per_document_stride={stride}: must be in 1..{window} (data.window)")
    return stride


def meaning(data, stride: int | None) -> str:
    """One line: which of the two losses this is."""
    if stride is None:
        return (
            f"loss: the run's validation windows (window {data.window}, stride {data.window}, "
            f"packing {data.packing}: a document cut by a window edge is scored without its "
            "earlier part); per_document=true scores each document on its own context"
        )
    return (
        f"loss: the per-document score, not the run's validation-window loss: each document "
        f"on its own context, whole if it fits the window ({data.window}), else rolling "
        f"windows {stride} apart (per_document_stride)"
    )


def document_batches(store, data, stride: int):
    """Every document on its own context (`packlm.evaluation.document_windows`)."""
    import numpy as np

    from packlm.data.epoch.loader import WindowDataset
    from packlm.evaluation.document_windows import DocumentBatches, document_rows

    lengths = np.diff(np.asarray(store.doc_offsets)) + int(data.bos)  # as the plan counts them
    rows = document_rows(lengths, data.window, stride, data.pack_buffer)
    bos = store.eos_id if data.bos else None
    mask = data.chat_supervised  # the run's chat mask, as its training and validation apply it
    dataset = WindowDataset(store.path, data.window, store.pad_id, bos, True, mask)
    return DocumentBatches(dataset, rows, data.batch_size)


def score(model, loader, byte_lengths, by_document, device: str, progress: bool):
    """(sum of CE in nats, supervised targets, their bytes, rows holding a token) over the
    loader's batches; each document's share added to `by_document` (a GroupTotals, or None)."""
    import torch

    from packlm.batch import DOCUMENT_KEY
    from packlm.model.loss import IGNORE_INDEX, head_cross_entropy

    nats, supervised, n_bytes, rows = 0.0, 0, 0, 0
    for batch in tqdm(
        loader, total=len(loader), desc="scoring", unit="batch", disable=not progress
    ):
        batch = {k: v.to(device) for k, v in batch.items() if torch.is_tensor(v)}
        inputs = (batch["input_ids"], batch["segment_ids"], batch["position_ids"])  # [B, T] each
        sum_ce, ce = head_cross_entropy(model, model, inputs, batch["labels"])  # the loss's
        if by_document is not None:  # ce [B, T]: per target, from the same pass
            by_document.add(ce, batch["labels"], batch[DOCUMENT_KEY], byte_lengths)
        mask = batch["labels"] != IGNORE_INDEX  # [B, T]
        nats += float(sum_ce)
        supervised += int(mask.sum())
        n_bytes += int((byte_lengths[batch["labels"].clamp(min=0)] * mask).sum())
        rows += int((batch["segment_ids"] >= 0).any(dim=1).sum())  # a PAD row is no window
    return nats, supervised, n_bytes, rows


def _write_table(totals, store, bos: bool, path: str | Path) -> dict[str, str | None]:
    from packlm.evaluation.document_losses import document_table, write_tables

    doc_nats, doc_targets, doc_bytes = totals.take().cpu().numpy()
    return write_tables(document_table(store, doc_nats, doc_targets, doc_bytes, bos), path)


def summary_table(result: dict[str, Any]) -> str:
    """The result as a person reads it (stderr); stdout keeps the JSON for tools."""
    bpb = "n/a" if result["bpb"] is None else f"{result['bpb']:.4f}"
    rows = [
        ("loss (nats/token)", f"{result['loss']:.4f}"), ("ppl", f"{result['ppl']:,.2f}"),
        ("bits per byte", bpb), ("documents", f"{result['documents']:,}"),
        ("tokens", f"{result['tokens']:,}"), ("supervised", f"{result['supervised_tokens']:,}"),
        ("bytes", f"{result['bytes']:,}"), ("windows", f"{result['windows']:,}"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value:>14}" for name, value in rows)


@hydra.main(config_path=CONFIG_DIR, config_name="evaluate", version_base=None)
def main(cfg: DictConfig) -> None:
    """Bad input (config, files, a missing extra) prints one line and exits 2 (config) or 1;
    HYDRA_FULL_ERROR=1 shows the traceback."""
    with one_line_errors(ValueError, OSError, ImportError, StoreError, MissingMandatoryValue):
        overrides = OmegaConf.to_container(cfg.data, resolve=True, throw_on_missing=True)
        table = table_path(
            cfg.get("per_document", False), cfg.get("per_document_path"), cfg.ckpt_path
        )
        result = evaluate(cfg.ckpt_path, overrides, cfg.cache_dir, cfg.device, progress=True,
                          per_document_path=table,
                          per_document_stride=cfg.get("per_document_stride"),
                          say=lambda line: print(line, file=sys.stderr))  # fmt: skip
    print(summary_table(result), file=sys.stderr)
    written = result.get("per_document")
    if written:
        print(f"per-document losses (hardest first): {written['csv']}", file=sys.stderr)
        print(f"  {written['parquet'] or written['note']}", file=sys.stderr)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


def check_config(cfg: DictConfig) -> None:
    """The precheck's validation of evaluate's own keys (the checkpoint's data keys are
    checked against it once it is read)."""
    if not isinstance(cfg.get("per_document"), bool):
        raise ConfigError(f"per_document={cfg.get('per_document')!r}: must be true or false")
    for key, low in (("data.batch_size", 1), ("data.window", 1), ("per_document_stride", 1)):
        value = OmegaConf.select(cfg, key)
        if key != "data.batch_size" and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"{key}={value!r}: must be a positive integer")


if __name__ == "__main__":
    exit_if_help("evaluate")
    precheck("evaluate", check_config)
    main()
