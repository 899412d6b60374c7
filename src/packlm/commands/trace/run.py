"""The Tracer of a run directory or a checkpoint: its saved data, tokenizer and trainer config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packlm.cache import DEFAULT_CACHE_DIR
from packlm.commands.trace.own_store import loader_state, own_store, trained_store
from packlm.commands.trace.tracer import Schedule, Tracer
from packlm.data.plans import EpochPlans
from packlm.errors import ConfigError


def tracer_of(path: str | Path, world_size: int | None = None) -> Tracer:
    """The Tracer of a run directory (`.hydra/config.yaml`) or a checkpoint (its stored data
    config and tokenizer; the trainer settings from its run's config when there is one)."""
    from omegaconf import OmegaConf

    from packlm.checkpoint.contents import KEY, read_checkpoint, run_dir_of
    from packlm.checkpoint.contents import tokenizer_from_checkpoint as tok_of
    from packlm.config.data import DataConfig
    from packlm.config.schema import register_configs
    from packlm.config.tokenizer import TokenizerConfig

    register_configs()  # a saved config names packlm's resolvers (`${packlm.project_dir:}`)
    path = Path(path)
    run_cfg, tokenizer, data, expected, trained, loader = None, None, None, None, None, {}
    if path.is_dir():
        saved = path / ".hydra" / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"{path}: no .hydra/config.yaml (not a run directory)")
        run_cfg = OmegaConf.to_container(OmegaConf.load(saved), resolve=True)
        last = path / "checkpoints" / "last.ckpt"
        if last.is_file():  # the store it trained on, its last step, its very tokenizer
            checkpoint = read_checkpoint(last)
            expected, trained = trained_store(checkpoint), checkpoint.get("global_step")
            loader = loader_state(checkpoint)
            tokenizer = tok_of(checkpoint) if KEY in checkpoint else None
    elif path.is_file():
        checkpoint = read_checkpoint(path)
        expected, trained = trained_store(checkpoint), checkpoint.get("global_step")
        loader = loader_state(checkpoint)
        extras = checkpoint.get(KEY) or {}
        if "data" not in extras:
            raise ConfigError(f"{path}: no packlm data config (not written by packlm's train.py)")
        data, tokenizer = extras["data"], tok_of(checkpoint)
        saved = run_dir_of(path) / ".hydra" / "config.yaml"
        if saved.is_file():
            run_cfg = OmegaConf.to_container(OmegaConf.load(saved), resolve=True)
        elif extras.get("cache_dir") and Path(extras["cache_dir"]).is_dir():  # run from Python
            run_cfg = {"cache_dir": extras["cache_dir"]}
    else:
        raise ConfigError(f"{path}: no such run directory or checkpoint")
    run_cfg = run_cfg or {}
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
