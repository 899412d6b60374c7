"""`python train.py --cfg job ...`: the printed config passes the validation a run does.

Hydra prints the composed config for `--cfg` without calling the task, so an override a run
refuses (data.packing=zip) used to print and exit 0. Hydra has no hook there: before handing
over to Hydra, `main` composes the same config with Hydra's Compose API and validates it;
an invalid value is the run's one `error: ...` line and exit 2.
"""

from __future__ import annotations

import argparse
import sys


def _hydra_flags() -> argparse.ArgumentParser:
    """The flags of Hydra's command line this check reads; the rest is Hydra's business."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--cfg", "-c")
    parser.add_argument("--multirun", "-m", action="store_true")
    parser.add_argument("--config-name", "-cn", default="config")
    parser.add_argument("--config-dir", "-cd")
    for flag in (("--package", "-p"), ("--config-path", "-cp"), ("--experimental-rerun",)):
        parser.add_argument(*flag)
    return parser


def check_shown_config(argv: list[str] | None = None) -> None:
    """With `--cfg job|all` (not a sweep, whose values are lists): compose and validate the
    config as the run would, exiting 2 with one line when a value is invalid."""
    args, _ = _hydra_flags().parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.cfg not in ("job", "all") or args.multirun:
        return
    from hydra import compose, initialize_config_dir

    from packlm.config.schema import CONFIG_DIR, validate_config
    from packlm.errors import ConfigError, one_line_errors

    with initialize_config_dir(args.config_dir or CONFIG_DIR, version_base=None):
        cfg = compose(args.config_name, overrides=args.overrides)
    with one_line_errors(ConfigError):
        validate_config(cfg)
