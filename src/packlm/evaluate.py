"""`python -m packlm.evaluate ckpt_path=<ckpt> data.val_sources=[<files>]`: score a checkpoint.

Every token of the given documents is a target exactly once (the validation windows of
DESIGN.md: stride = window, no offset, tail = pad), read by the same source readers as
training and encoded with the checkpoint's own tokenizer. Prints JSON: loss (nats per
supervised token), ppl, bits per byte and the token counts, after a progress bar over the
windows and the same figures as a table on stderr. Window, packing and the reader
options are the checkpoint's unless given (data.window=..., data.packing=...).
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

from packlm.config import CONFIG_DIR
from packlm.config_help import exit_if_help
from packlm.data.config import DataConfig
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


def evaluate(ckpt_path: str | Path, data_overrides: dict[str, Any], cache_dir: str | Path,
             device: str = "cpu", progress: bool = False) -> dict[str, Any]:  # fmt: skip
    import torch  # not for `--help`

    from packlm.checkpoint.load import load_checkpoint, tokenizer_config_of
    from packlm.data.datamodule import PackedDataModule
    from packlm.data.store.prepared import prepare_stores
    from packlm.model.loss import IGNORE_INDEX, head_cross_entropy
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
            sum_ce, _ = head_cross_entropy(model, model, inputs, batch["labels"])  # the loss's path
            mask = batch["labels"] != IGNORE_INDEX  # [B, T]
            nats += float(sum_ce)
            supervised += int(mask.sum())
            n_bytes += int((byte_lengths[batch["labels"].clamp(min=0)] * mask).sum())
            windows += batch["input_ids"].shape[0]
        store = dm.store("val")
        if supervised == 0:
            raise ValueError(f"data.val_sources={list(data.sources)}: no token to score")
        loss = nats / supervised
        return {
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
        result = evaluate(cfg.ckpt_path, overrides, cfg.cache_dir, cfg.device, progress=True)
    print(summary_table(result), file=sys.stderr)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    exit_if_help("evaluate")
    main()
