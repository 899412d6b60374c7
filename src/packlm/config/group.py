"""The base of every config group's dataclass: one converter from a mapping, one `validate`.

Each group (`data`, `tokenizer`, `model`, `optim`, `trainer`, `train`) is a dataclass whose
fields are its keys, with their defaults and attribute docstrings written once there: the
Hydra schema, the conf/ presets and docs/configuration.md's table all derive from them.
`from_mapping` turns a Hydra node, a dict or None into the validated dataclass; a key the
group does not have is an error naming it and the allowed ones.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf

from packlm.errors import ConfigError

G = TypeVar("G", bound="ConfigGroup")


class ConfigGroup:
    group: ClassVar[str]
    """The group's name in the config (`data`, `model`, ...), the prefix of its keys in errors."""

    @classmethod
    def from_mapping(cls: type[G], values: G | Mapping[str, Any] | None = None) -> G:
        """The validated group from an instance, a mapping (a Hydra node: resolved) or None."""
        if isinstance(values, cls):
            return values.check_finite().validate()
        if values is None:
            return cls().check_finite().validate()
        if not (isinstance(values, Mapping) or hasattr(values, "keys")):
            raise TypeError(f"{cls.group}: expected {cls.__name__} or a mapping, got {values!r}")
        plain = {k: plain_value(values[k]) for k in values if k != "_target_"}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(plain) - known)
        if unknown:
            near = difflib.get_close_matches(unknown[0], sorted(known), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise ConfigError(
                f"{cls.group}.{unknown[0]}: unknown key{hint}; allowed {sorted(known)}"
            )
        return cls(**cls._from_config_values(plain)).check_finite().validate()

    @classmethod
    def _from_config_values(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Hook: how values typed in a config become field values (e.g. escapes expanded)."""
        return values

    def check_finite(self: G) -> G:
        """Refuse NaN and infinity in every float of the group, nested ones too (optim.betas,
        data.sources[0].weight): `x <= 0` is False for NaN, so a range check alone lets it
        through, and optim.lr=inf trains a checkpoint of NaN weights."""
        for f in fields(self):
            check_finite(f"{self.group}.{f.name}", getattr(self, f.name))
        return self

    def validate(self: G) -> G:
        """Raise ConfigError naming the key of the first invalid value; returns self.
        Every group overrides it with its own checks."""
        return self


def plain_value(value: Any) -> Any:
    """OmegaConf containers (Hydra passes them) -> resolved lists and dicts."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def check_finite(key: str, value: Any) -> None:
    """ConfigError naming `key` (or the nested key) when a float in `value` is NaN or infinite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={value!r}: must be a finite number")
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_finite(f"{key}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite(f"{key}[{i}]", v)


def check_bool(key: str, value: Any) -> None:
    """ConfigError unless `value` is true or false: Hydra converts what is typed, but a dict
    or a checkpoint's hparams reach the dataclass as they are."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r}: must be true or false")


def check_positive_int(key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{key}={value!r}: must be a positive integer")


def check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r}: allowed {list(allowed)}")
