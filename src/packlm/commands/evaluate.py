"""`python -m packlm.evaluate ckpt_path=<ckpt> data.val_sources=[<files>]`: score a checkpoint.

Every token of the given documents is a target exactly once (the validation windows of
DESIGN.md: stride = window, no offset, tail = pad), read by the same source readers as
training and encoded with the checkpoint's own tokenizer. Prints JSON: loss (nats per
supervised token), ppl, bits per byte and the token counts, after a progress bar over the
windows and the same figures as a table on stderr. Window, packing and the reader
options are the checkpoint's unless given (data.window=..., data.packing=...).

`per_document=true` also writes the loss of every document, hardest first
(`packlm.evaluation.document_losses`): a CSV at `per_document_path` (default `per_document.csv` in
the working directory) and a Parquet table beside it where pyarrow is installed; the JSON
names both (`per_document`), stderr says where they went.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue
from tqdm.auto import tqdm

from packlm.config.data import DataConfig
from packlm.config.help import exit_if_help
from packlm.config.schema import CONFIG_DIR
from packlm.data.store.token_store import StoreError
from packlm.errors import ConfigError, one_line_errors

FROM_CHECKPOINT = (
    "window", "packing", "bos", "text_field", "separator", "encoding_errors", "normalize_newlines",
)  # fmt: skip


def eval_data_config(saved: dict[str, Any], overrides: dict[str, Any]) -> DataConfig:
    """The checkpoint's data config, the non-null overrides on top, the files to score as the
    only source (all of it one split: val_fraction 0), read in this process."""
    sources = overrides.get("val_sources")
    if isinstance(sources, str):  # data.val_sources=a.txt, without brackets
        sources = [sources]
    if not sources:
        raise ConfigError("data.val_sources: give the files to score (data.val_sources=[a.txt])")
    known = {f.name for f in fields(DataConfig)}
    values = {k: v for k, v in saved.items() if k in known and k in FROM_CHECKPOINT}
    values.update({k: v for k, v in overrides.items() if v is not None and k in known})
    values.update(sources=list(sources), val_sources=None, val_fraction=0.0, num_workers=0)
    values["stride"] = values.get("window", DataConfig().window)  # validation windows anyway
    return DataConfig.from_mapping(values)


DEFAULT_TABLE = "per_document.csv"


def table_path(per_document: bool, path: str | None) -> Path | None:
    """Where the per-document CSV goes (None: no table); a given path turns the table on."""
    if not per_document and not path:
        return None
    path = Path(path or DEFAULT_TABLE)
    if path.suffix == ".parquet":
        raise ConfigError(
            f"per_document_path={path}: names the CSV (the Parquet table goes beside it, with "
            f"the suffix .parquet); give a .csv path such as {path.with_suffix('.csv')}"
        )
    return path


def evaluate(ckpt_path: str | Path, data_overrides: dict[str, Any], cache_dir: str | Path,
             device: str = "cpu", progress: bool = False,
             per_document_path: str | Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The JSON result; with `per_document_path`, also the per-document tables there."""
    import torch  # not for `--help`

    from packlm.batch import DOCUMENT_KEY
    from packlm.checkpoint.load import load_checkpoint, tokenizer_config_of
    from packlm.data.datamodule import PackedDataModule
    from packlm.data.store.prepared import prepare_stores
    from packlm.model.loss import IGNORE_INDEX, head_cross_entropy
    from packlm.model.source_loss import GroupTotals
    from packlm.model.transformer import Transformer

    with torch.no_grad():
        ckpt = load_checkpoint(ckpt_path)
        data = eval_data_config(ckpt.data, data_overrides).validate(ckpt.model.context_length)
        tokenizer_cfg = tokenizer_config_of(ckpt.tokenizer, cache_dir)
        try:
            prepared = prepare_stores(data, tokenizer_cfg, cache_dir, progress=False)
        except ValueError as e:  # ConfigError, SourceError: name the key the user typed
            message = str(e).replace("data.sources", "data.val_sources", 1)
            message = message.replace("no training documents", "no documents to score")
            raise type(e)(message) from None
        # the scored documents are the "train" store (val_fraction 0): read it as validation
        prepared = replace(
            prepared, val_dir=prepared.train_dir, val_manifest=prepared.train_manifest
        )
        dm = PackedDataModule(tokenizer_cfg, cache_dir, ckpt.model.context_length, data=data,
                              prepared=prepared, progress=False)  # fmt: skip
        model = Transformer(ckpt.model)
        model.load_state_dict(ckpt.weights)
        model.to(device).eval()
        byte_lengths = torch.as_tensor(ckpt.tokenizer.token_byte_lengths(), device=device)  # [V]
        nats, supervised, n_bytes, windows = 0.0, 0, 0, 0
        by_document = GroupTotals(dm.store("val").n_docs) if per_document_path else None
        loader = dm.val_dataloader()
        for batch in tqdm(
            loader, total=len(loader), desc="scoring", unit="batch", disable=not progress
        ):
            batch = {k: v.to(device) for k, v in batch.items() if torch.is_tensor(v)}
            inputs = (
                batch["input_ids"],
                batch["segment_ids"],
                batch["position_ids"],
            )  # [B, T] each
            sum_ce, ce = head_cross_entropy(model, model, inputs, batch["labels"])  # the loss's
            if by_document is not None:  # ce [B, T]: per target, from the same pass
                by_document.add(ce, batch["labels"], batch[DOCUMENT_KEY], byte_lengths)
            mask = batch["labels"] != IGNORE_INDEX  # [B, T]
            nats += float(sum_ce)
            supervised += int(mask.sum())
            n_bytes += int((byte_lengths[batch["labels"].clamp(min=0)] * mask).sum())
            windows += batch["input_ids"].shape[0]
        store = dm.store("val")
        if supervised == 0:
            raise ValueError(f"data.val_sources={list(data.sources)}: no token to score")
        loss = nats / supervised
        result = {
            "ckpt_path": str(ckpt_path),
            "sources": list(map(str, data.sources)),
            "loss": loss,
            "ppl": math.exp(min(loss, 700.0)),
            "bpb": nats / math.log(2) / n_bytes if n_bytes else None,
            "documents": store.n_docs,
            "tokens": store.n_tokens,
            "supervised_tokens": supervised,
            "bytes": n_bytes,
            "windows": windows,
            "window": data.window,
            "packing": data.packing,
        }
        if by_document is not None:
            result["per_document"] = _write_table(by_document, store, data.bos, per_document_path)
        return result


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
        table = table_path(cfg.get("per_document", False), cfg.get("per_document_path"))
        result = evaluate(cfg.ckpt_path, overrides, cfg.cache_dir, cfg.device, progress=True,
                          per_document_path=table)  # fmt: skip
    print(summary_table(result), file=sys.stderr)
    written = result.get("per_document")
    if written:
        print(f"per-document losses (hardest first): {written['csv']}", file=sys.stderr)
        print(f"  {written['parquet'] or written['note']}", file=sys.stderr)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    exit_if_help("evaluate")
    main()
