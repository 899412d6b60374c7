"""`--help` of every command: the keys it reads, each with its one-line meaning.

The meanings are the attribute docstrings written under the fields of the config
dataclasses (docs/config_table.py builds docs/configuration.md's table from the same
reader), and for the keys of generate and evaluate, which have no dataclass, the lines
below. Each entry point calls `exit_if_help` before importing torch or Lightning, so
`--help` answers at once; Hydra's own help stays behind `--hydra-help`.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import NamedTuple


def attribute_docs(cls: type) -> dict[str, str]:
    """{field: its docstring, on one line} of a dataclass and its bases, read from the source."""
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


def documented_keys(config: type | None = None) -> list[tuple[str, str]]:
    """(key, meaning) of every key of a config dataclass (default: train.py's PackLMConfig),
    groups as `group.key`; a group passing other keys through (the Trainer's) adds
    `group.*`. The order of docs/configuration.md's table."""
    if config is None:
        from packlm.config.schema import PackLMConfig

        config = PackLMConfig
    out = []
    top_docs = attribute_docs(config)
    for f in fields(config):
        if f.default_factory is MISSING:  # a top-level key
            out.append((f.name, top_docs.get(f.name, "")))
            continue
        group = type(f.default_factory())  # a group: one row per documented key
        docs = attribute_docs(group)
        passthrough = getattr(group, "passthrough", None)
        for g in fields(group):
            if not g.name.startswith("_") and (g.name in docs or passthrough is None):
                out.append((f"{f.name}.{g.name}", docs.get(g.name, "")))
        if passthrough:  # e.g. every other lightning.Trainer argument
            out.append((f"{f.name}.*", passthrough))
    return out


GENERATE_KEYS = {
    "ckpt_path": "The checkpoint to sample from (required); it carries its own tokenizer.",
    "prompt": "The text the samples continue (quote it: 'prompt=\"def main(\"').",
    "max_new_tokens": "Tokens generated after the prompt.",
    "temperature": "Sampling temperature (0: greedy).",
    "top_k": "Sample among the k most likely tokens (null: all).",
    "num_samples": "How many texts to sample (seeds seed, seed+1, ...).",
    "seed": "Seed of the first sample.",
    "device": "torch device: cpu, cuda, cuda:1, mps.",
}
EVALUATE_KEYS = {
    "ckpt_path": "The checkpoint to score (required); its tokenizer encodes the documents.",
    "data.val_sources": "Files, globs, .jsonl to score (null: the run's validation split).",
    "data.window": "Window length (null: the checkpoint's, as for the keys below).",
    "data.packing": "Packing strategy (null: the checkpoint's).",
    "data.text_field": "The .jsonl field holding the text (null: the checkpoint's).",
    "data.separator": "Text between documents (null: the checkpoint's).",
    "data.encoding_errors": "Invalid UTF-8: replace or error (null: the checkpoint's).",
    "data.batch_size": "Windows per forward pass.",
    "per_document": "Each document on its own context; every document's loss (CSV, Parquet).",
    "per_document_stride": "Targets between a long document's rolling windows (null: window/2).",
    "per_document_path": "The per-document CSV (null: ./per_document.csv), Parquet beside it. "
    "Setting it turns per_document on.",
    "cache_dir": "Where the scored documents' token store is cached.",
    "device": "torch device: cpu, cuda, cuda:1, mps.",
}
STATS_KEYS = {"+epochs": "How many training epochs' plans to describe (default 1)."}
EXPORT_KEYS = ("format", "out", "overwrite", "ckpt_path", "data.", "tokenizer.", "cache_dir")


class Command(NamedTuple):
    usage: str
    what: str
    keys: list[tuple[str, str]]
    groups: bool = False  # list the config groups (model=small, experiment=tiny, ...)


def _train_keys(prefixes: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(k, d) for k, d in documented_keys() if k.startswith(prefixes)]


def command(name: str, config: type | None = None) -> Command:
    """The usage line, purpose and keys of one command (`config`: export's dataclass)."""
    if name == "train":
        return Command(
            "python train.py [key=value ...] [group=option ...]",
            "Train a model: data, tokenizer and model from the config, a run folder in outputs/.",
            documented_keys(),
            groups=True,
        )
    if name == "prepare":
        return Command(
            "python -m packlm.prepare [key=value ...]",
            "Build the tokenizer and both token stores in the cache (the keys of train.py).",
            _train_keys(("data.", "tokenizer.", "cache_dir")),
        )
    if name == "stats":
        return Command(
            "python -m packlm.stats [key=value ...] [+epochs=N]",
            "Print as JSON what the epoch plans do to the data (the keys of train.py).",
            _train_keys(("data.", "tokenizer.", "model.context_length", "cache_dir"))
            + list(STATS_KEYS.items()),
        )
    if name == "generate":
        return Command(
            "python -m packlm.generate ckpt_path=<file.ckpt> [key=value ...]",
            "Sample text from a checkpoint.",
            list(GENERATE_KEYS.items()),
        )
    if name == "evaluate":
        return Command(
            "python -m packlm.evaluate ckpt_path=<file.ckpt> [data.val_sources=[<files>]] "
            "[key=value ...]",
            "Score every token of some documents (default: the run's validation split) once: "
            "loss, ppl, bits per byte (JSON).",
            list(EVALUATE_KEYS.items()),
        )
    if name == "export":
        return Command(
            "python -m packlm.export format=<hf|tiktoken|nanogpt|megatron> out=<dir> "
            "[key=value ...]",
            "Write a checkpoint (hf, tiktoken) or the token stores (nanogpt, megatron).",
            sorted(  # format, out, overwrite, ckpt_path first
                ((k, d) for k, d in documented_keys(config) if k.startswith(EXPORT_KEYS)),
                key=lambda row: EXPORT_KEYS.index(row[0]) if row[0] in EXPORT_KEYS else 9,
            ),
        )
    raise ValueError(f"no such command: {name}")


def _groups() -> list[str]:
    """`group=option` lines from the folders of conf/ (no Hydra needed to list them)."""
    from packlm.config.schema import CONFIG_DIR

    lines = []
    for folder in sorted(p for p in Path(CONFIG_DIR).iterdir() if p.is_dir()):
        if folder.name == "hydra":
            continue
        options = sorted(p.stem for p in folder.glob("*.yaml") if not p.stem.startswith("help"))
        if options:
            lines.append(f"  {folder.name}={'|'.join(options)}")
    return lines


def one_line(meaning: str, width: int = 78) -> str:
    """The first sentence of a key's meaning, cut at a word to fit `width` characters."""
    first = re.split(r"(?<=[a-z0-9)`'\"][.])\s+(?=[A-Z(])", meaning, maxsplit=1)[0]
    if len(first) <= width:
        return first
    return first[: first.rfind(" ", 0, width - 4)] + " ..."


def help_text(name: str, config: type | None = None) -> str:
    """The whole `--help` of command `name` (docs/configuration.md has every key in full)."""
    cmd = command(name, config)
    width = max(len(k) for k, _ in cmd.keys) + 2
    lines = [f"usage: {cmd.usage}", "", cmd.what, "", "keys (key=value):"]
    lines += [f"  {key:<{width}}{one_line(meaning)}" for key, meaning in cmd.keys]
    if cmd.groups:
        lines += ["", "groups (conf/<group>/<option>.yaml):", *_groups()]
    lines += [
        "",
        "Every key in full: docs/configuration.md. --cfg job prints the composed config;",
        "--hydra-help shows Hydra's own flags (-m for sweeps, --config-name, ...).",
    ]
    return "\n".join(lines) + "\n"


def exit_if_help(name: str, config: type | None = None) -> None:
    """Print the help of command `name` and exit 0 when the command line asks for it."""
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        sys.stdout.write(help_text(name, config))
        raise SystemExit(0)
