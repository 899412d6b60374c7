"""docs/configuration.md's table of every key, generated from the config dataclasses (defaults written once).

    python docs/config_table.py           # rewrite the table in docs/configuration.md
    python docs/config_table.py --check   # exit 1 if the table is not current (a test runs this)

Each row is one key: its default as the composed config gives it (the dataclass default,
or what conf/ sets instead, such as `data.seed: ${seed}`), and its meaning, the attribute
docstring written under the field in the dataclass (packlm.config.help reads them, for
every command's `--help` too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from packlm.config.help import documented_keys
from packlm.config.schema import CONFIG_DIR

PAGE = Path(__file__).resolve().parent / "configuration.md"
START, END = "<!-- config-table:start -->", "<!-- config-table:end -->"


def rows() -> list[tuple[str, str, str]]:
    """(key, default, meaning) of every key of the composed default config."""
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        composed = OmegaConf.to_container(compose("config"), resolve=False)
    out = []
    for key, meaning in documented_keys():  # the reader `--help` uses too
        group, _, name = key.rpartition(".")
        if name == "*":
            out.append((key, "(the library's)", meaning))
        else:
            out.append((key, composed[group][name] if group else composed[name], meaning))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    for key, default, meaning in rows():
        shown = json.dumps(default, ensure_ascii=False) if not isinstance(default, str) else default
        lines.append(f"| `{key}` | `{_cell(shown)}` | {_cell(meaning)} |")
    return "\n".join(lines)


def with_table(readme: str) -> str:
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is not current")
    args = parser.parse_args()
    current = PAGE.read_text(encoding="utf-8")
    wanted = with_table(current)
    if args.check:
        if wanted != current:
            print("docs/configuration.md is not current: run python docs/config_table.py")
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
