"""The `data` group's validation: each rule names its key, and all run before any work.

`DataConfig.validate` calls `check_data`; a source entry's own rules are in `sources.py`.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from packlm.config.group import check_choice, check_positive_int
from packlm.config.mixture import check_mixture
from packlm.config.sources import check_source_entry
from packlm.errors import ConfigError

PACKING_MODES = ("none", "document", "stream")
TAIL_POLICIES = ("drop", "cover", "pad")
GROUP_BY = ("none", "source", "directory")
SNAP_TO = ("none", "document", "paragraph")
PACK_STRATEGIES = ("ordered", "best_fit")
ENCODING_ERRORS = ("strict", "replace", "skip")
CHAT_SUPERVISED = ("assistant", "all")
CHAT_OVERFLOW = ("drop", "cut_turns")


def check_data(cfg: Any, model_context: int | None = None) -> Any:
    """Raise ConfigError naming the key of the first invalid value of `cfg` (a DataConfig);
    returns it (with window and stride set from data.curriculum's last phase)."""
    if not isinstance(cfg.sources, (list, tuple)) or len(cfg.sources) == 0:
        raise ConfigError("data.sources: give at least one source (e.g. [default])")
    for i, entry in enumerate(cfg.sources):
        check_source_entry(f"data.sources[{i}]", entry)
    if cfg.val_sources is not None:
        for i, entry in enumerate(cfg.val_sources):
            check_source_entry(f"data.val_sources[{i}]", entry)
    check_mixture(cfg)
    if not 0.0 <= cfg.val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction={cfg.val_fraction}: must be in [0, 1)")
    check_choice("data.encoding_errors", cfg.encoding_errors, ENCODING_ERRORS)
    if cfg.separator is not None and cfg.separator == "":
        raise ConfigError("data.separator: must be a non-empty string or null")
    shard = parse_shard(cfg.shard)
    if cfg.shards is not None:
        check_positive_int("data.shards", cfg.shards)
        if shard is not None and shard[1] != cfg.shards:
            raise ConfigError(
                f"data.shard={cfg.shard}: a shard of {shard[1]}, but data.shards={cfg.shards}"
            )
    if cfg.curriculum is not None:  # the last phase's window and stride are the run's
        cfg.window, cfg.stride = _check_curriculum(cfg, model_context)
    for key in ("window", "stride", "batch_size"):
        check_positive_int(f"data.{key}", getattr(cfg, key))
    if not isinstance(cfg.num_workers, int) or cfg.num_workers < 0:
        raise ConfigError(f"data.num_workers={cfg.num_workers}: must be an integer >= 0")
    check_choice("data.packing", cfg.packing, PACKING_MODES)
    check_choice("data.tail", cfg.tail, TAIL_POLICIES)
    check_choice("data.group_by", cfg.group_by, GROUP_BY)
    check_choice("data.snap", cfg.snap, SNAP_TO)
    if not isinstance(cfg.snap_tolerance, int) or cfg.snap_tolerance < 0:
        raise ConfigError(f"data.snap_tolerance={cfg.snap_tolerance!r}: an integer >= 0")
    if cfg.snap != "none" and cfg.snap_tolerance >= cfg.stride:
        raise ConfigError(
            f"data.snap_tolerance={cfg.snap_tolerance}: must be less than "
            f"data.stride={cfg.stride} (a window would pass the next one's start)"
        )
    check_choice("data.pack_strategy", cfg.pack_strategy, PACK_STRATEGIES)
    check_choice("data.chat_supervised", cfg.chat_supervised, CHAT_SUPERVISED)
    check_choice("data.chat_overflow", cfg.chat_overflow, CHAT_OVERFLOW)
    _check_skips(cfg.skip_documents, cfg.skip_steps)
    buffer = cfg.pack_buffer
    if not isinstance(buffer, int) or isinstance(buffer, bool) or buffer < 2:
        raise ConfigError(f"data.pack_buffer={buffer!r}: an integer >= 2 (documents)")
    if cfg.pack_strategy == "best_fit" and (cfg.pack_size is None or cfg.packing == "none"):
        raise ConfigError(
            f"data.pack_strategy=best_fit: needs packs to fit (data.pack_size set, it is "
            f"{cfg.pack_size}, and data.packing document or stream, it is {cfg.packing})"
        )
    if cfg.pack_size is not None and cfg.pack_size < cfg.window + 1:
        raise ConfigError(
            f"data.pack_size={cfg.pack_size}: must be at least data.window + 1 = {cfg.window + 1}"
        )
    if model_context is not None and cfg.window > model_context:
        raise ConfigError(
            f"data.window={cfg.window}: longer than the model's context "
            f"(model.context_length={model_context})"
        )
    return cfg


def parse_shard(value: Any) -> tuple[int, int] | None:
    """data.shard "i/N" -> (i, N), None for null; ConfigError unless 0 <= i < N."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", value) if isinstance(value, str) else None
    if match is None or not int(match[1]) < int(match[2]):
        raise ConfigError(
            f'data.shard={value!r}: expected "i/N", shard i of N with 0 <= i < N (e.g. 0/4)'
        )
    return int(match[1]), int(match[2])


def _check_skips(documents: Any, steps: Any) -> None:
    """data.skip_documents: indices >= 0 or non-empty ids; data.skip_steps: distinct steps >= 0."""
    if not isinstance(documents, (list, tuple)):
        raise ConfigError(f"data.skip_documents={documents!r}: a list of document indices or ids")
    for i, d in enumerate(documents):
        if isinstance(d, bool) or not (isinstance(d, int) and d >= 0 or isinstance(d, str) and d):
            raise ConfigError(
                f"data.skip_documents[{i}]={d!r}: a store document index >= 0 or an id "
                '"path:record" as python -m packlm.trace prints it'
            )
    if not isinstance(steps, (list, tuple)):
        raise ConfigError(f"data.skip_steps={steps!r}: a list of optimizer steps")
    for i, k in enumerate(steps):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ConfigError(f"data.skip_steps[{i}]={k!r}: an optimizer step >= 0")
    if len(set(steps)) != len(steps):
        twice = sorted(k for k, c in Counter(steps).items() if c > 1)
        raise ConfigError(f"data.skip_steps: steps {twice} are listed twice")


CURRICULUM_KEYS = ("window", "stride", "until")


def _check_curriculum(cfg: Any, model_context: int | None) -> tuple[int, int]:
    """Check data.curriculum phase by phase, and that data.window/stride do not contradict
    it; returns the last phase's (window, stride)."""
    phases = cfg.curriculum
    if not isinstance(phases, (list, tuple)) or len(phases) == 0:
        raise ConfigError(f"data.curriculum={phases!r}: a list of {{window, stride, until}} phases")
    previous = 0
    for i, phase in enumerate(phases):
        key = f"data.curriculum[{i}]"
        if not (hasattr(phase, "get") and hasattr(phase, "keys")):
            raise ConfigError(f"{key}={phase!r}: expected {{window: ..., stride: ..., until: ...}}")
        unknown = sorted(set(phase.keys()) - set(CURRICULUM_KEYS))
        if unknown:
            raise ConfigError(f"{key}: unknown keys {unknown}; allowed {list(CURRICULUM_KEYS)}")
        window, until = phase.get("window"), phase.get("until")
        stride = phase.get("stride", window)
        check_positive_int(f"{key}.window", window)
        check_positive_int(f"{key}.stride", stride)
        last = i == len(phases) - 1
        if last and until is not None:
            raise ConfigError(f"{key}.until={until!r}: the last phase runs to the end (no until)")
        if not last:
            check_positive_int(f"{key}.until", until)
            if until <= previous:
                raise ConfigError(
                    f"{key}.until={until}: must be greater than the previous phase's ({previous})"
                )
            previous = until
        if model_context is not None and window > model_context:
            raise ConfigError(
                f"{key}.window={window}: longer than the model's context "
                f"(model.context_length={model_context}: it must cover the largest window)"
            )
        if cfg.pack_size is not None and cfg.pack_size < window + 1:
            raise ConfigError(f"{key}.window={window}: data.pack_size={cfg.pack_size} < window + 1")
        tolerance = cfg.snap_tolerance
        if cfg.snap != "none" and isinstance(tolerance, int) and tolerance >= stride:
            raise ConfigError(
                f"{key}.stride={stride}: data.snap_tolerance={tolerance} must be less than it"
            )
    run = {"window": phases[-1]["window"], "stride": phases[-1].get("stride", phases[-1]["window"])}
    for key, value in run.items():  # a window or stride set beside a curriculum would be lost
        given, default = getattr(cfg, key), type(cfg).__dataclass_fields__[key].default
        if given not in (value, default):
            raise ConfigError(
                f"data.{key}={given}: data.curriculum sets the {key} (its last phase: {value});"
                f" change that phase, or set data.curriculum=null to use data.{key}"
            )
    return run["window"], run["stride"]
