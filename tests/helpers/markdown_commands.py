"""The shell commands of README.md and docs/*.md, as the tests that run them read them.

A command is one line of a ```bash block (a trailing `\\` joins the next line), its `# ...`
comment cut off. A line whose comment contains ILLUSTRATION is not runnable as written
(it needs several machines, a cluster, a GPU, or a placeholder path): the tests skip it by
that mark alone, and the mark is visible to the reader too.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ILLUSTRATION = "(illustration)"
BLOCK = re.compile(r"^```bash\n(.*?)^```", flags=re.S | re.M)


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
        return ILLUSTRATION in self.comment

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def commands(path: Path) -> list[Command]:
    """Every command line of every bash block of `path`, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for index, block in enumerate(BLOCK.finditer(text)):
        first = text.count("\n", 0, block.start(1)) + 1
        pending, start = "", first
        for offset, raw in enumerate(block.group(1).splitlines()):
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
    `python -m packlm.<tool> ...`; None for any other command."""
    argv = command.argv
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):  # VAR=value python ...
        argv = argv[1:]
    if len(argv) >= 2 and argv[0] == "python" and argv[1] == "train.py":
        return "train", argv[2:]
    if len(argv) >= 3 and argv[:2] == ["python", "-m"] and argv[2].startswith("packlm."):
        return argv[2].removeprefix("packlm."), argv[3:]
    return None


def readme_command(prefix: str) -> Command:
    """The README command that starts with `prefix`."""
    found = [c for c in commands(ROOT / "README.md") if c.text.startswith(prefix)]
    assert len(found) == 1, f"README.md: {len(found)} commands start with {prefix!r}"
    return found[0]
