"""`python -m packlm.export format=<hf|tiktoken|nanogpt|megatron> out=<dir> ...`

hf and tiktoken read `ckpt_path` (tiktoken also takes `tokenizer.path` instead); nanogpt and
megatron export the token stores of the `data` / `tokenizer` config (the same overrides as
train.py), encoded with the checkpoint's tokenizer when `ckpt_path` is given. Prints what
it wrote as JSON on stdout.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue

from packlm.commands.export import FORMATS
from packlm.commands.export.output import MARKER, destination, output_dir
from packlm.commands.prepare import logs_to_stderr
from packlm.config.data import DataConfig
from packlm.config.help import exit_if_help
from packlm.config.precheck import precheck
from packlm.config.schema import CONFIG_DIR, PackLMConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.token_store import StoreError
from packlm.errors import ConfigError, one_line_errors


@dataclass
class ExportConfig(PackLMConfig):
    """train.py's config (data, tokenizer, cache_dir: the stores to export) plus:"""

    format: str = "???"
    """hf | tiktoken | nanogpt | megatron."""
    out: str = "???"
    """The folder to write; it must be absent or empty unless `overwrite`."""
    overwrite: bool = False
    """Replace an earlier export in `out` (its old content is removed); any other non-empty
    folder is refused."""


ConfigStore.instance().store(name="packlm_export_schema", node=ExportConfig)


def export(cfg: DictConfig) -> dict:
    """Check the config, then write the export; returns the summary printed."""
    fmt, ckpt_path = cfg.format, cfg.get("ckpt_path")
    if fmt not in FORMATS:
        raise ConfigError(f"format={fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "hf" and not ckpt_path:
        raise ConfigError("ckpt_path: format=hf exports a checkpoint (ckpt_path=<file.ckpt>)")
    if fmt == "tiktoken" and not ckpt_path and cfg.tokenizer.path is None:
        raise ConfigError("format=tiktoken: give ckpt_path=<file.ckpt> or tokenizer.path=<dir>")
    dest = destination(cfg.out, cfg.overwrite)  # before anything is read
    if fmt == "hf":
        from packlm.commands.export.hf import require_hf

        require_hf()  # before reading anything
    from packlm.checkpoint.load import load_checkpoint  # torch: not for `--help`

    ckpt = load_checkpoint(ckpt_path) if ckpt_path else None
    notes: list[str] = []
    with output_dir(dest, cfg.overwrite) as tmp:
        if fmt == "hf":
            from packlm.commands.export.hf import export_hf

            export_hf(ckpt.weights, ckpt.model, ckpt.tokenizer, tmp)
        elif fmt == "tiktoken":
            from packlm.commands.export.tiktoken_ranks import export_tiktoken

            export_tiktoken(ckpt.tokenizer if ckpt else _tokenizer_at(cfg.tokenizer), tmp)
        else:
            notes = _export_stores(cfg, fmt, ckpt, tmp)
        files = sorted(p.name for p in tmp.iterdir() if p.name != MARKER)
    return {"format": fmt, "out": str(dest), "files": files, "notes": notes}


def _tokenizer_at(cfg: DictConfig):
    from packlm.tokenizer.obtain import load_path

    t = TokenizerConfig.from_mapping(cfg)
    return load_path(t.path, "tokenizer.path", t.special_tokens, t.pattern)


def _export_stores(cfg: DictConfig, fmt: str, ckpt, tmp: Path) -> list[str]:
    from packlm.data.store.prepared import prepare_stores

    data = DataConfig.from_mapping(cfg.data)
    if ckpt is not None:
        from packlm.checkpoint.load import tokenizer_config_of

        tokenizer_cfg = tokenizer_config_of(ckpt.tokenizer, cfg.cache_dir)
    else:
        tokenizer_cfg = TokenizerConfig.from_mapping(cfg.tokenizer)
    prepared = prepare_stores(data, tokenizer_cfg, cfg.cache_dir, progress=True)
    stores = {split: prepared.open(split) for split in ("train", "val")}
    if fmt == "nanogpt":
        from packlm.commands.export.nanogpt import export_nanogpt

        return export_nanogpt(stores, prepared.tokenizer, tmp)
    from packlm.commands.export.megatron import export_megatron

    return export_megatron(stores, prepared.tokenizer, tmp)


@hydra.main(config_path=CONFIG_DIR, config_name="export", version_base=None)
def main(cfg: DictConfig) -> None:
    """Bad input (config, files, a missing extra) prints one line and exits 2 (config) or 1;
    HYDRA_FULL_ERROR=1 shows the traceback."""
    logs_to_stderr()
    with one_line_errors(ValueError, OSError, ImportError, StoreError, MissingMandatoryValue):
        summary = export(cfg)
    json.dump(summary, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    exit_if_help("export", ExportConfig)
    precheck("export")
    main()
