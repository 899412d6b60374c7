"""Compose a documented command's config without running it: the check that a renamed key,
a wrong type or a removed option in README.md or docs/ fails a test before it reaches a user.

Hydra commands (train.py, prepare, stats, export, generate, evaluate) are composed with their
own config and overrides, every combination of a sweep (`-m`), and validated as the command
validates them, with the checkpoints the line names present as empty placeholder files (the
validation only checks that they exist). The argument-line tools (trace, compare, cache) parse
their arguments and fail on the missing run, which they must name. A placeholder in angle
brackets (`outputs/<date>/<time>`) stands for the user's value: PLACEHOLDERS fill it in.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from helpers.markdown_commands import Command, packlm_overrides
from packlm.commands.export.__main__ import FORMATS  # registers export's schema too
from packlm.config.schema import CONFIG_DIR, validate_config

CONFIGS = {
    "train": "config",
    "prepare": "tools",
    "stats": "tools",
    "export": "export",
    "generate": "generate",
    "evaluate": "evaluate",
}
PLACEHOLDERS = {"<date>": "2026-12-05", "<time>": "10-00-00"}
VALIDATED = {"train", "prepare", "stats", "export"}  # the others check at run time
PLUGINS = {
    "hydra/launcher=joblib": "hydra_plugins.hydra_joblib_launcher",
    "hydra/launcher=submitit": "hydra_plugins.hydra_submitit_launcher",
    "hparams_search=optuna": "hydra_plugins.hydra_optuna_sweeper",
}
"""An override that needs an optional Hydra plugin (an extra of packlm): skipped without it."""


def needed_plugins(args: list[str]) -> list[str]:
    return [
        module for a in args for prefix, module in PLUGINS.items() if a.startswith(prefix)
    ]  # fmt: skip


def sweep_combinations(args: list[str]) -> list[list[str]]:
    """Each job's overrides of a `-m` sweep (one list when nothing is swept)."""
    parsed = OverridesParser.create().parse_overrides([a for a in args if a != "-m"])
    choices = [
        [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [o.input_line]
        for o in parsed
    ]
    return [list(c) for c in itertools.product(*choices)]


def compose_command(command: Command, cwd: Path) -> int:
    """Compose and validate `command` in `cwd`; the number of configs composed. Raises with
    the command's file and line on an unknown key, a wrong type or a bad value."""
    tool, args = packlm_overrides(command)
    for placeholder, value in PLACEHOLDERS.items():
        args = [a.replace(placeholder, value) for a in args]
    for module in needed_plugins(args):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{command}: needs {module} (an extra of packlm)")
    try:
        if tool in CONFIGS:
            return _compose_hydra(tool, args, cwd)
        return _parse_arguments(tool, args, cwd)
    except Exception as e:
        raise AssertionError(f"{command}\n  {type(e).__name__}: {e}") from e


def _compose_hydra(tool: str, args: list[str], cwd: Path) -> int:
    jobs = sweep_combinations(args)
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        for overrides in jobs:
            cfg = compose(CONFIGS[tool], overrides=overrides, return_hydra_config=True)
            for key in ("ckpt_path", "init_from"):
                if cfg.get(key):  # a placeholder: only its existence is checked here
                    placeholder = cwd / cfg[key]
                    placeholder.parent.mkdir(parents=True, exist_ok=True)
                    placeholder.touch()
            if tool in VALIDATED:
                validate_config(cfg)
            if tool == "export":
                assert cfg.format in FORMATS, f"format={cfg.format}: not one of {FORMATS}"
    return len(jobs)


def _parse_arguments(tool: str, args: list[str], cwd: Path) -> int:
    """The tool reads its arguments, then fails on the run that is not here, naming it."""
    out = io.StringIO()
    with redirect_stderr(out), redirect_stdout(io.StringIO()):
        if tool == "cache":
            from packlm.commands.cache import main

            assert main(["--cache-dir", str(cwd / "cache"), *args]) == 0
            return 1
        if tool == "compare":
            from packlm.commands.compare import main
        elif tool == "trace":
            from packlm.commands.trace.cli import main
        else:
            raise AssertionError(f"python -m packlm.{tool}: not a packlm command")
        with pytest.raises(SystemExit) as ended:
            main(args)
    said = f"{ended.value.code} {out.getvalue()}"
    path = next(a for a in args if "=" not in a and not a.startswith("-"))
    assert path in said and "usage" not in said.lower(), said
    return 1
