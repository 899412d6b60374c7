"""`python -m packlm.prepare [overrides]`: train or load the tokenizer, build both token stores.

Takes the same Hydra overrides as train.py, so a cluster job can build the cache once
before many training jobs share it; prints the manifests (and the tokenizer's directory)
as JSON on stdout, logs and progress bars on stderr.
"""

from __future__ import annotations

import json
import logging
import sys

import hydra
from omegaconf import DictConfig

from packlm.config import CONFIG_DIR
from packlm.data.config import DataConfig
from packlm.data.store.cache import prepare_stores
from packlm.tokenizer.config import TokenizerConfig


@hydra.main(config_path=CONFIG_DIR, config_name="tools", version_base=None)
def main(cfg: DictConfig) -> None:
    logs_to_stderr()
    data, tokenizer = DataConfig.from_mapping(cfg.data), TokenizerConfig.from_mapping(cfg.tokenizer)
    prepared = prepare_stores(data, tokenizer, cfg.cache_dir, progress=True)
    report = {
        "tokenizer": str(prepared.tokenizer_dir),
        "train": {"path": str(prepared.train_dir), **prepared.train_manifest},
        "val": {"path": str(prepared.val_dir), **prepared.val_manifest},
    }
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def logs_to_stderr() -> None:
    """Hydra logs to stdout; move that to stderr so `... > manifests.json` holds only JSON."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


if __name__ == "__main__":
    main()
