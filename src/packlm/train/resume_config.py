"""A resume takes its run's own settings: `python train.py ckpt_path=<run>/checkpoints/last.ckpt`
works as printed after a run started with `experiment=tiny data.window=64 ...`.

The run folder records the overrides of its launch and of every accepted resume
(`.hydra/overrides.yaml`, `.hydra/resume-<time>/overrides.yaml`: packlm.runtime.run_records;
a refused command leaves none). The config of a resume is
composed from those, oldest first, then the command line's: one value per key, the latest
winning, so a key given now is applied (and a resume refuses or logs it as for any change),
and a key not given keeps the run's value. A run folder without them (a run started with
`train(cfg)`) is resumed with the command line's config alone, as before.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hydra import compose
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from packlm.runtime.run_records import run_folder_of, run_records

log = logging.getLogger(__name__)


def run_overrides(run_dir: Path) -> list[str] | None:
    """The overrides the run was launched and resumed with, oldest first (None: no record)."""
    records = run_records(run_dir)
    if not records or not (records[0].path / "overrides.yaml").is_file():
        return None
    return [o for record in records for o in record.overrides()]


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def merged_overrides(saved: list[str], given: list[str]) -> list[str]:
    """`saved` then `given`, one override per key, the later one winning (a key first added
    with `+` keeps its `+`: it is still not in the schema)."""
    merged: dict[str, str] = {}
    for override in (*saved, *given):
        key = _key(override)
        before = merged.get(key)
        if before is not None and before.startswith("+") and not override.startswith(("+", "~")):
            override = "+" + override
        merged[key] = override
    return list(merged.values())


def resume_config(cfg: DictConfig, given: list[str] | None = None) -> DictConfig:
    """The config of `ckpt_path`'s run with the command line's overrides (`given`, default
    Hydra's task overrides) on top; `cfg` unchanged where the run folder has no record."""
    if not Path(cfg.ckpt_path).is_file():
        return cfg  # validation names it
    saved = run_overrides(run_folder_of(Path(cfg.ckpt_path)))
    if saved is None:
        return cfg
    if given is None:
        given = list(HydraConfig.get().overrides.task)
    overrides = merged_overrides(saved, given)
    kept = [o for o in overrides if o not in given]
    if kept:
        log.info("resume: the run's own settings %s", " ".join(kept))
    return compose(config_name="config", overrides=overrides)
