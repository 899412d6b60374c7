"""The shell commands of README.md and docs/*.md, as the tests that run them read them.

A command is one line of a ```bash block, or of an unlabelled block whose every line starts
with a command (docs/trace.md's), a trailing `\\` joining the next line, its `# ...` comment
cut off. A line whose comment starts with ILLUSTRATION is not runnable as written here (it
needs several machines, a cluster, or changes the environment): the test that runs the
blocks skips it by that mark alone, and the reader sees the mark too.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ILLUSTRATION = "[illustration]"
SHELLS = ("bash", "sh", "shell")
COMMAND_WORDS = ("python", "pip", "pytest", "torchrun", "srun", "sbatch", "tensorboard")


@dataclass(frozen=True)
class Command:
    """One command line of a Markdown file's bash block."""

    file: str  # relative to the project root
    line: int  # 1-based, where the command starts
    block: int  # index of its block in the file
    text: str  # without the comment
    comment: str

    @property
    def illustration(self) -> bool:
        return self.comment.lstrip("# ").startswith(ILLUSTRATION)

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(first line number, language, lines) of every fenced block, fences paired in order."""
    found, open_at, language, body = [], None, "", []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if open_at is None:
                open_at, language, body = number + 1, line[3:].strip(), []
            else:
                found.append((open_at, language, body))
                open_at = None
        elif open_at is not None:
            body.append(line)
    return found


def commands(path: Path) -> list[Command]:
    """Every command line of every shell block of `path`, in order."""
    found = []
    for index, (first, language, lines) in enumerate(blocks(path.read_text(encoding="utf-8"))):
        words = [line.split(" ", 1)[0] for line in lines if line.strip()]
        if language not in SHELLS and (language or not all(w in COMMAND_WORDS for w in words)):
            continue  # another language, or an unlabelled block of output or a diagram
        pending, start = "", first
        for offset, raw in enumerate(lines):
            if not pending:
                start = first + offset
            code, comment = split_comment(raw)
            if code.rstrip().endswith("\\"):
                pending += code.rstrip()[:-1] + " "
                continue
            code = (pending + code).strip()
            pending = ""
            if code:
                name = str(path.relative_to(ROOT))
                found.append(Command(name, start, index, code, comment))
    return found


def split_comment(line: str) -> tuple[str, str]:
    """('code', '# comment'): the first `#` outside quotes that starts a word."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i:]
    return line, ""


def all_commands() -> list[Command]:
    return [c for path in markdown_files() for c in commands(path)]


def packlm_overrides(command: Command) -> tuple[str, list[str]] | None:
    """('train' or the packlm tool, its arguments) for `python train.py ...` and
    `python -m packlm.<tool> ...`, also behind a launcher (`srun python train.py`, `torchrun
    ... train.py`); None for any other command."""
    argv = command.argv
    while "&&" in argv:  # `pip install ... && python train.py`: the packlm part
        cut = argv.index("&&")
        if packlm_argv(argv[:cut]):
            return packlm_argv(argv[:cut])
        argv = argv[cut + 1 :]
    return packlm_argv(argv)


def packlm_argv(argv: list[str]) -> tuple[str, list[str]] | None:
    if "train.py" in argv:
        return "train", argv[argv.index("train.py") + 1 :]
    for i in range(1, len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1].startswith("packlm.") and argv[i - 1] == "python":
            return argv[i + 1].removeprefix("packlm."), argv[i + 2 :]
    return None


def documented_command(prefix: str) -> Command:
    """The command of README.md or docs/*.md that starts with `prefix` (exactly one)."""
    found = [c for c in all_commands() if c.text.startswith(prefix)]
    assert len(found) == 1, f"README.md, docs/: {len(found)} commands start with {prefix!r}"
    return found[0]
