"""docs/configuration.md's table of every key, generated from the config dataclasses (defaults written once).

    python docs/config_table.py           # rewrite the table in docs/configuration.md
    python docs/config_table.py --check   # exit 1 if the table is not current (a test runs this)

Each row is one key: its default as the composed config gives it (the dataclass default,
or what conf/ sets instead, such as `data.seed: ${seed}`), and its meaning, the attribute
docstring written under the field in the dataclass.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import sys
import textwrap
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from packlm.config import CONFIG_DIR, PackLMConfig

PAGE = Path(__file__).resolve().parent / "configuration.md"
START, END = "<!-- config-table:start -->", "<!-- config-table:end -->"


def attribute_docs(cls: type) -> dict[str, str]:
    """{field: its docstring} of a dataclass and its bases, read from the source."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not is_dataclass(klass) or klass.__module__ == "types":  # made by make_dataclass
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def rows() -> list[tuple[str, str, str]]:
    """(key, default, meaning) of every key of the composed default config."""
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        composed = OmegaConf.to_container(compose("config"), resolve=False)
    out = []
    top_docs = attribute_docs(PackLMConfig)
    for f in fields(PackLMConfig):
        if f.default_factory is MISSING:  # a top-level key
            out.append((f.name, composed[f.name], top_docs.get(f.name, "")))
            continue
        group = type(f.default_factory())  # a group: one row per documented key
        docs = attribute_docs(group)
        passthrough = getattr(group, "passthrough", None)
        for g in fields(group):
            if not g.name.startswith("_") and (g.name in docs or passthrough is None):
                out.append((f"{f.name}.{g.name}", composed[f.name][g.name], docs.get(g.name, "")))
        if passthrough:  # e.g. every other lightning.Trainer argument
            out.append((f"{f.name}.*", "(the library's)", passthrough))
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
