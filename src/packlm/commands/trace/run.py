"""The Tracer of a run directory or a checkpoint: the data, tokenizer and trainer settings it
trained with at the step traced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packlm.cache import DEFAULT_CACHE_DIR
from packlm.commands.trace.own_store import loader_state, own_store, trained_store
from packlm.commands.trace.tracer import Schedule, Tracer
from packlm.data.plans import EpochPlans
from packlm.errors import ConfigError


def tracer_of(path: str | Path, world_size: int | None = None, step: int | None = None) -> Tracer:
    """The Tracer of a run directory or a checkpoint, with the settings the run trained with
    at optimizer step `step` (None: its last step): those of the run's launch or resume record
    in force then (packlm.runtime.run_records; a resume that changed a setting, such as the
    mixture schedule, starts a record), else the launch's `.hydra/config.yaml`. A checkpoint's
    own data config and loader state are used where the step is under the record the
    checkpoint was written with; a run started from Python has only the checkpoint's."""
    from packlm.checkpoint.contents import KEY, read_checkpoint, run_dir_of
    from packlm.checkpoint.contents import tokenizer_from_checkpoint as tok_of
    from packlm.config.data import DataConfig
    from packlm.config.tokenizer import TokenizerConfig
    from packlm.runtime.run_records import record_at, settings_of

    path = Path(path)
    if path.is_dir():
        run_dir, ckpt = path, path / "checkpoints" / "last.ckpt"
        if not (path / ".hydra" / "config.yaml").is_file():
            raise ConfigError(f"{path}: no .hydra/config.yaml (not a run directory)")
    elif path.is_file():
        run_dir, ckpt = run_dir_of(path), path
    else:
        raise ConfigError(f"{path}: no such run directory or checkpoint")
    tokenizer, data, expected, trained, loader, extras = None, None, None, None, {}, {}
    record = record_at(run_dir, step)
    if ckpt.is_file():  # the store it trained on, its last step, its very tokenizer
        checkpoint = read_checkpoint(ckpt)
        expected, trained = trained_store(checkpoint), checkpoint.get("global_step")
        extras = checkpoint.get(KEY) or {}
        if path.is_file() and "data" not in extras:
            raise ConfigError(f"{path}: no packlm data config (not written by packlm's train.py)")
        tokenizer = tok_of(checkpoint) if "tokenizer" in extras else None
        if record == record_at(run_dir, max(int(trained or 0) - 1, 0)):  # written under it
            data, loader = extras.get("data"), loader_state(checkpoint)
    run_cfg = settings_of(record.config() if record is not None else None)
    cache = extras.get("cache_dir")
    if not run_cfg and cache and Path(cache).is_dir():  # a run started from Python
        run_cfg = {"cache_dir": cache}
    trainer = run_cfg.get("trainer") or {}
    data = DataConfig.from_mapping(data if data is not None else run_cfg.get("data") or {})
    if tokenizer is None:
        tokenizer = TokenizerConfig.from_mapping(run_cfg.get("tokenizer") or {})
    cache = run_cfg.get("cache_dir")
    kwargs = {"cache_dir": cache} if cache else {}
    prepared = None
    if expected is not None and data.shard is None and data.shards is None:
        cache_dir = Path(cache or DEFAULT_CACHE_DIR).expanduser().resolve()
        prepared = own_store(data, tokenizer, cache_dir, expected, path)
    plans = EpochPlans(tokenizer, data=data, progress=False, prepared=prepared, **kwargs)
    schedule = Schedule(
        world_size if world_size is not None else world_of(trainer),
        int(trainer.get("accumulate_grad_batches") or 1),
        trainer.get("limit_train_batches"),
    )
    tracer = Tracer(plans, schedule)
    tracer.trained_steps = None if trained is None else int(trained)
    if tracer.streams is not None and loader.get("mixture_passes"):  # counted back from there
        tracer.streams.resume_from(loader["mixture_passes"])
    return tracer


def world_of(trainer: dict[str, Any]) -> int:
    """Ranks of the run: trainer.devices x trainer.num_nodes (an int or a list of ids)."""
    devices = trainer.get("devices", 1)
    if isinstance(devices, list):
        devices = len(devices)
    elif isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if not isinstance(devices, int) or devices < 1:
        raise ConfigError(
            f"trainer.devices={devices!r}: the rank count is not in the config; give world=N"
        )
    return devices * int(trainer.get("num_nodes") or 1)
