"""Every command's config checked before Hydra runs the job and before torch or Lightning load.

`python train.py data.windw=64` used to print Hydra's 7-line block after 10-20 s of imports,
exit 1, and advise `+data.windw=64`. `precheck` composes the same config with Hydra's Compose
API (hydra and omegaconf only) and answers any mistake in one line, exit 2:

- an unknown key or group: `data.windw: unknown key (did you mean data.window?)`;
- an unknown option of a group: `model=mediun: no such option (did you mean medium?) ...`;
- a value of the wrong type: `data.window=abc: must be an integer`;
- a bad value: the command's own validation (train.py: `validate_config`, without the
  checks only Lightning's signature can make; the run checks those again);
- a URL holding a credential, anywhere on the command line or in the composed config
  (`packlm.config.credentials`), before Hydra writes `.hydra/overrides.yaml`.

A sweep (`-m`) is composed once per value of each swept key (the others at their first
value, up to `SWEEP_VALUES` values a key). A resume (`ckpt_path=`) is composed from the run's
own overrides by the job, so there only keys, types and credentials are checked here. What the
precheck accepts runs as before; anything it cannot judge is left to Hydra.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import itertools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from packlm.config import credentials
from packlm.config.schema import CONFIG_DIR, validate_config
from packlm.errors import ConfigError, one_line_errors

SWEEP_VALUES = 32
"""Values of one swept key composed and validated here; a longer sweep's later values (a
range of the same type) are validated by their own jobs."""
IN_FILE = re.compile(r"In '([^']+)': (\w+) raised while composing config:\n?(.*)", re.S)
"""Hydra's report of an error inside a config file: the file, the error's type, its text."""
TYPE_WORDS = {
    "Integer": "must be an integer",
    "Float": "must be a number",
    "Boolean": "must be true or false",
    "String": "must be a string",
}


def hydra_flags() -> argparse.ArgumentParser:
    """The flags of Hydra's command line the precheck reads; the rest is Hydra's business."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--cfg", "-c")
    parser.add_argument("--multirun", "-m", action="store_true")
    parser.add_argument("--config-name", "-cn")
    parser.add_argument("--config-dir", "-cd")
    parser.add_argument("--config-path", "-cp")
    parser.add_argument("--info", "-i", nargs="?", const="all")
    parser.add_argument("--shell-completion", "-sc", action="store_true")
    parser.add_argument("--hydra-help", action="store_true")
    for flag in (("--package", "-p"), ("--experimental-rerun",), ("--resolve",)):
        parser.add_argument(*flag)
    return parser


def precheck(
    config_name: str,
    validate: Callable[[DictConfig], Any] | None = None,
    argv: list[str] | None = None,
) -> None:
    """Check the command line of a Hydra command whose config is `config_name`: exit 2 with
    one `error: ...` line on any mistake (HYDRA_FULL_ERROR=1: Hydra reports it itself).
    `validate(cfg)` is the command's own check of a composed config (raises ConfigError).
    Runs with HYDRA_FULL_ERROR=1 too (then a traceback): a credential is refused either way."""
    args, _ = hydra_flags().parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.hydra_help or args.info or args.shell_completion or args.experimental_rerun:
        return
    with one_line_errors(ConfigError):
        for override in args.overrides:  # first: no message below may quote a secret
            credentials.check_text(override.split("=", 1)[0].lstrip("+~"), override)
        jobs = job_overrides(args.overrides, args.multirun)
        config_dir = args.config_path or CONFIG_DIR
        if not Path(config_dir).is_absolute():  # Hydra: relative to the command's file
            config_dir = str(Path(sys.argv[0]).resolve().parent / config_dir)
        with initialize_config_dir(config_dir, version_base=None):
            for overrides in jobs:
                cfg = composed(args.config_name or config_name, overrides, args.config_dir)
                credentials.check_config(plain(cfg))
                if validate is not None:
                    validate(cfg)


def validate_train(cfg: DictConfig) -> None:
    """train.py's validation before Lightning is imported. A resume (`ckpt_path=`) is left to
    the job, which composes it from the run's own overrides and validates that."""
    if not cfg.get("ckpt_path"):
        validate_config(cfg, lightning=False)


def job_overrides(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override lists to compose: the command line's, or in a sweep one list per value
    of each swept key with the other sweeps at their first value."""
    parsed = parse(overrides)
    if not multirun or not any(o.is_sweep_override() for o in parsed):
        return [overrides]
    values = [sweep_values(o, line) for o, line in zip(parsed, overrides, strict=True)]
    first = [v[0] for v in values if v]
    jobs = [first]
    for i, vals in enumerate(values):
        if not vals:
            continue
        at = sum(1 for v in values[:i] if v)  # this override's place in `first`
        jobs += [[*first[:at], v, *first[at + 1 :]] for v in vals[1:]]
    return jobs


def parse(overrides: list[str]) -> list[Override]:
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as e:
        bad = next((o for o in overrides if _unparsable(o)), " ".join(overrides))
        reason = str(e).splitlines()[0]
        raise ConfigError(
            f"{bad}: cannot read this override ({reason}); quote a value holding spaces, "
            "brackets or commas: 'key=\"a, b\"'"
        ) from None


def _unparsable(override: str) -> bool:
    try:
        OverridesParser.create().parse_overrides([override])
    except OverrideParseException:
        return True
    return False


def sweep_values(override: Override, line: str) -> list[str]:
    """The `key=value` forms of each value a sweep override takes (up to SWEEP_VALUES); a
    plain override is its own one value; an interval or glob (a sweeper's business): none."""
    if not override.is_sweep_override():
        return [line]
    left = line.split("=", 1)[0]
    try:
        values = list(itertools.islice(override.sweep_string_iterator(), SWEEP_VALUES))
    except (HydraException, TypeError, ValueError, AssertionError):  # interval(), glob()
        return []
    return [f"{left}={v}" for v in values]


def composed(config_name: str, overrides: list[str], config_dir: str | None) -> DictConfig:
    """The config Hydra would compose, or ConfigError naming the override it refused."""
    if config_dir is not None:  # Hydra's --config-dir: searched after conf/
        overrides = [*overrides, f"hydra.searchpath=[file://{os.path.abspath(config_dir)}]"]
    try:
        return compose(config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(explain(e, config_name, overrides)) from None
    except yaml.YAMLError as e:  # a config file that is not YAML
        mark = getattr(e, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}" if mark else "a config file"
        raise ConfigError(f"{where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None


def explain(e: BaseException, config_name: str, overrides: list[str]) -> str:
    """Hydra's refusal as packlm's one line: the key, what is wrong, the closest valid name."""
    cause = e.__cause__
    message = str(e)
    if isinstance(e, MissingConfigException) and e.options is not None:
        group, _, option = (e.missing_cfg_file or "").rpartition("/")
        near = difflib.get_close_matches(option, e.options, n=1, cutoff=0.5)
        hint = f" (did you mean {group}={near[0]}?)" if near else ""
        return f"{group}={option}: no such option{hint}; options: {', '.join(e.options)}"
    if isinstance(e, MissingConfigException):
        return message.splitlines()[0]
    in_file = IN_FILE.match(message)
    if in_file:  # a preset's or a --config-dir file's own key or value
        return in_file_error(*in_file.groups(), config_name=config_name)
    full_key = getattr(cause, "full_key", None)
    if message.startswith("Could not override") and full_key:
        return unknown_key(full_key, getattr(cause, "parent_node", None), config_name)
    if isinstance(cause, ValidationError) and full_key:
        value = _given(overrides, full_key)
        return f"{full_key}={value}: {type_words(str(getattr(cause, 'msg', '') or cause))}"
    if isinstance(e, ConfigCompositionException) and message.startswith("Could not append"):
        key = message.split("'")[1]
        return f"+{key}: {key} is in the config already; set it without the +: {key}=..."
    if message.startswith("Could not delete"):
        key = message.split("'")[1]
        return f"~{key}: no such key to delete"
    if message.startswith(("Ambiguous value", "Sweep parameters")):
        line = message.split("'")[1]
        return (
            f"{line}: a comma list or range is a sweep: add -m to run one job per value, or "
            "write a list as [a,b] or quote the text"
        )
    return message.strip().splitlines()[0] if message.strip() else type(e).__name__


def unknown_key(full_key: str, parent: Any, config_name: str) -> str:
    """`data.windw: unknown key (did you mean data.window?)`: the closest key beside it, and
    at the top also the config groups (`modle=medium` -> model)."""
    prefix, _, name = full_key.rpartition(".")
    known = [str(k) for k in parent] if isinstance(parent, DictConfig) else []
    if not prefix:
        known += [p.name for p in Path(CONFIG_DIR).iterdir() if p.is_dir()]
    near = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=0.6)
    if near:
        return f"{full_key}: unknown key (did you mean {prefix + '.' if prefix else ''}{near[0]}?)"
    command = "python train.py" if config_name == "config" else f"python -m packlm.{config_name}"
    return f"{full_key}: unknown key (the keys: {command} --help)"


def in_file_error(where: str, kind: str, reason: str, config_name: str) -> str:
    """`experiment/mine.yaml: data.windw: unknown key (did you mean data.window?)`: a wrong
    key or value written in a config file rather than typed."""
    key = re.search(r"full_key: (\S+)", reason)
    first = reason.splitlines()[0] if reason else kind
    if key and kind in ("ConfigKeyError", "ConfigAttributeError"):
        parent = None
        with contextlib.suppress(HydraException, OmegaConfBaseException):
            parent = OmegaConf.select(compose(config_name), key[1].rpartition(".")[0] or "")
        return f"{where}.yaml: {unknown_key(key[1], parent, config_name)}"
    value = re.match(r"Value '(.*)' (of type|is not)", first)
    if key and kind == "ValidationError" and value:
        return f"{where}.yaml: {key[1]}={value[1]}: {type_words(first)}"
    return f"{where}.yaml: {first}"


def type_words(reason: str) -> str:
    """OmegaConf's reason a value does not fit its key's type, in a few words."""
    reason = reason.splitlines()[0]
    if "is not a valid bool" in reason:
        return TYPE_WORDS["Boolean"]
    for name, words in TYPE_WORDS.items():
        if reason.endswith(f"converted to {name}"):
            return words
    return reason


def _given(overrides: list[str], full_key: str) -> str:
    """The value the command line gave `full_key` (as typed), else `?`."""
    for override in reversed(overrides):
        key, _, value = override.lstrip("+~").partition("=")
        if key == full_key:
            return value
    return "?"


def plain(cfg: DictConfig) -> Any:
    """The config as plain values, interpolations resolved where they resolve."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException:
        return OmegaConf.to_container(cfg, resolve=False)
