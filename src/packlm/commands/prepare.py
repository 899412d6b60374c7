"""`python -m packlm.prepare [overrides]`: train or load the tokenizer, build both token stores.

Takes the same Hydra overrides as train.py, so a cluster job can build the cache once
before many training jobs share it; prints the manifests (and the tokenizer's directory)
as JSON on stdout, logs, progress bars and a summary table on stderr. The summary says, per
split, documents, tokens, UTF-8 bytes read and bytes stored (what the stored tokens decode
to, EOS excluded, counted again from disk) and what reading skipped; read and stored must
agree, else the command fails.

In shards: `data.shard=i/N` builds shard i alone (run the N of them anywhere that shares
cache_dir, e.g. `-m data.shard=0/4,1/4,2/4,3/4` through any Hydra launcher);
`data.shards=N` builds the missing shards in turn and reports the N as one corpus.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig
from tqdm import tqdm  # not tqdm.auto: in Jupyter without ipywidgets it warns at import

from packlm.config.data import DataConfig
from packlm.config.help import exit_if_help
from packlm.config.precheck import precheck
from packlm.config.schema import CONFIG_DIR
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.prepared import PreparedData, prepare_stores
from packlm.data.store.sources.document import SourceError
from packlm.data.store.token_store import TOKENS_FILE, StoreError
from packlm.data.store.verify import decoded_bytes
from packlm.errors import ConfigError, one_line_errors


@hydra.main(config_path=CONFIG_DIR, config_name="tools", version_base=None)
def main(cfg: DictConfig) -> None:
    """Bad input (config, sources, files) prints one line and exits 2 (config) or 1; Ctrl-C
    prints one line and exits 130 (the cache holds only complete entries: builds write to a
    temporary name); HYDRA_FULL_ERROR=1 shows the traceback."""
    logs_to_stderr()
    try:
        _prepare(cfg)
    except KeyboardInterrupt:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print("error: interrupted (Ctrl-C); the cache keeps only complete entries, run the "
              "command again to finish", file=sys.stderr)  # fmt: skip
        raise SystemExit(130) from None


def _prepare(cfg: DictConfig) -> None:
    with one_line_errors(ConfigError, SourceError, StoreError, OSError):
        data = DataConfig.from_mapping(cfg.data)
        tokenizer = TokenizerConfig.from_mapping(cfg.tokenizer)
        prepared = prepare_stores(data, tokenizer, cfg.cache_dir, progress=True, build_shards=True)
        rows = summary(prepared, progress=True)
        sys.stderr.write(format_summary(rows))
        report = {
            "tokenizer": str(prepared.tokenizer_dir),
            "train": {"path": _paths(prepared.train_dir), **prepared.train_manifest},
            "val": {"path": _paths(prepared.val_dir), **prepared.val_manifest},
            "summary": rows,
        }
        json.dump(report, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        bad = [s for s, row in rows.items() if not agrees(row)]
        if bad:
            raise StoreError(
                f"{bad}: the bytes stored differ from the bytes read (see the summary)"
            )


def _paths(where: Path | tuple[Path, ...]) -> str | list[str]:
    """A store's directory, or with data.shards its shards' directories."""
    return [str(p) for p in where] if isinstance(where, tuple) else str(where)


def summary(prepared: PreparedData, progress: bool = False) -> dict[str, dict[str, Any]]:
    """Per split: documents, tokens, bytes read, bytes stored (recounted from the store's
    tokens), what reading dropped by reason, and cuts inside over-long pre-tokens."""
    lengths = prepared.tokenizer.token_byte_lengths()
    stores = {split: prepared.open(split) for split in ("train", "val")}
    total = sum(s.n_tokens for s in stores.values())
    rows = {}
    with tqdm(
        total=total, unit="tok", unit_scale=True, desc="verifying", disable=not progress
    ) as bar:
        for split, store in stores.items():
            counts = store.manifest["counts"]
            rows[split] = {
                "documents": store.n_docs,
                "tokens": store.n_tokens,
                "bytes_read": counts["bytes"],
                "bytes_stored": sum(
                    decoded_bytes(part.path / TOKENS_FILE, part.tokens.dtype, lengths, bar.update)
                    for part in getattr(store, "parts", [store])  # data.shards: each shard's
                ),
                "chat_overflow_bytes": counts.get("chat_overflow", {}).get("bytes_dropped", 0),
                "dropped": counts.get("dropped", {}),
                "left_out": counts.get("left_out", {}),
                "cuts_inside_pretokens": counts.get("cuts_inside_pretokens", 0),
            }
    return rows


def agrees(row: dict[str, Any]) -> bool:
    """The bytes read are the bytes stored, but for the text of the turns that
    data.chat_overflow left out (counted as it cut them)."""
    return row["bytes_read"] == row["bytes_stored"] + row.get("chat_overflow_bytes", 0)


def format_summary(rows: dict[str, dict[str, Any]]) -> str:
    """The summary as a table, then what was skipped, in words."""
    head = ("split", "documents", "tokens", "bytes read", "bytes stored", "agree")
    lines = [head] + [
        (split, f"{r['documents']:,}", f"{r['tokens']:,}", f"{r['bytes_read']:,}",
         f"{r['bytes_stored']:,}", "yes" if agrees(r) else "NO")
        for split, r in rows.items()
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["  ".join(c.rjust(w) if i else c.ljust(w)
                     for i, (c, w) in enumerate(zip(line, widths, strict=True)))
           for line in lines]  # fmt: skip
    for split, r in rows.items():
        dropped = ", ".join(
            f"{n:,} {why.replace('_', ' ')}" for why, n in r["dropped"].items() if n
        )
        out.append(f"{split} skipped: {dropped or 'nothing'}")
        if r.get("chat_overflow_bytes"):
            out.append(f"{split} conversations longer than a sample: {r['chat_overflow_bytes']:,} "
                       "bytes of their turns left out (data.chat_overflow)")  # fmt: skip
        for why, names in r.get("left_out", {}).items():  # links: docs/links.md
            more = r["dropped"].get(why, len(names)) - len(names)
            out.append(f"{split} {why.replace('_', ' ')}: {'; '.join(names)}"
                       + (f"; and {more:,} more" if more > 0 else ""))  # fmt: skip
        if r["cuts_inside_pretokens"]:
            out.append(f"{split}: {r['cuts_inside_pretokens']:,} cuts inside over-long pre-tokens")
    return "\n".join(out) + "\n"


def logs_to_stderr() -> None:
    """Hydra logs to stdout; move that to stderr so `... > manifests.json` holds only JSON."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def check_config(cfg: DictConfig) -> None:
    """The precheck's validation: the groups prepare reads."""
    DataConfig.from_mapping(cfg.data)
    TokenizerConfig.from_mapping(cfg.tokenizer)


if __name__ == "__main__":
    exit_if_help("prepare")
    precheck("tools", check_config)
    main()
