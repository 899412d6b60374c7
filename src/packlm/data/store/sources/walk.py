"""Walks and globs over a local tree: each real file listed once, through any symbolic links.

The rule (docs/links.md): links are followed wherever they point. A file is the inode it
reaches, so a second name of a file already listed (a symlink to it, a hard link) is not
read again; a folder reached again through a link (a loop such as `sub/up -> ..`, or two
links to one folder) is not walked again; a link whose target cannot be reached (dangling,
or a loop of links) and an entry that is not a regular file (FIFO, socket, device: never
opened) are left out. Each of these is counted by reason and named (`Listing.skipped`), and
ends in the data summary. A file or folder is read under its own name when the tree holds
one (else under the first link reached, in sorted order), and files are read sorted by
path: the same names and order on every run.
Hidden names (a leading dot) are matched only by a pattern part that starts with a dot.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from packlm.data.store.sources.document import SourceError

SKIP_REASONS = ("special_files", "broken_links", "second_names", "folders_reached_again")
"""Why a walk leaves an entry out, in the order the summary names them."""

EVERYTHING = ("**", "*")
"""A directory walk: every non-hidden file at any depth."""


@dataclass
class Listing:
    files: list[Path] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    """Reason (`SKIP_REASONS`) -> the names left out, in walk order."""

    def skip(self, reason: str, name: str) -> None:
        self.skipped.setdefault(reason, []).append(name)


def split_glob(pattern: str) -> tuple[Path, tuple[str, ...]]:
    """`a/b/*/c/**/*.txt` -> (Path("a/b"), ("*", "c", "**", "*.txt")): the folder before the
    first part holding a glob character, and the parts to match from there."""
    parts = Path(pattern).parts
    k = next(i for i, part in enumerate(parts) if any(c in part for c in "*?["))
    return Path(*parts[:k]) if k else Path("."), parts[k:]


def walk(top: Path, pattern: tuple[str, ...], selected: Callable[[str], bool]) -> Listing:
    """The regular files under `top` whose path relative to it matches `pattern` (parts; `**`
    any number of folders) and is `selected` (include/exclude), sorted, by the rule above.
    The tree is walked without links first, then each link met is followed (and the links
    met there after), so a file or folder that has a name of its own in the tree is read
    under it, and a link to it is the name left out."""
    tree = _Tree(pattern, selected)
    tree.folder(top, "", _closure(frozenset([0]), pattern), _stat(top))
    while tree.links:
        tree.follow(*tree.links.popleft())
    tree.listing.files.sort()
    return tree.listing


class _Tree:
    def __init__(self, pattern: tuple[str, ...], selected: Callable[[str], bool]):
        self.pattern, self.selected = pattern, selected
        self.listing = Listing()
        self.files: dict[tuple[int, int] | str, str] = {}  # real file -> the name it is read as
        self.folders: dict[tuple[int, int, frozenset[int]], str] = {}  # walked (and states)
        self.links: deque[tuple[Path, str, frozenset[int]]] = deque()  # met, to follow

    def folder(self, path: Path, rel: str, states: frozenset[int], st: os.stat_result) -> None:
        """Walk a folder depth first in sorted order, links put aside for `follow`."""
        if not self._first_visit(path, states, st):
            return
        stack = [(path, rel, iter(sorted(_names(path))), states)]
        while stack:
            directory, rel, names, states = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                continue
            at = _step(states, name, self.pattern)
            if not at:
                continue
            path, here = directory / name, f"{rel}{name}"
            st = _stat(path, follow=False)
            if stat.S_ISLNK(st.st_mode):
                self.links.append((path, here, at))
            elif stat.S_ISDIR(st.st_mode):
                more = self._folder_states(at)
                if more and self._first_visit(path, more, st):
                    stack.append((path, f"{here}/", iter(sorted(_names(path))), more))
            else:
                self.file(path, here, at, st)

    def follow(self, path: Path, here: str, at: frozenset[int]) -> None:
        try:
            st = os.stat(path)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                raise SourceError(f"{path}: cannot read ({e.strerror})") from e
            if self._wanted(here, at):
                self.listing.skip("broken_links", f"{path} -> {os.readlink(path)}")
            return
        if stat.S_ISDIR(st.st_mode):
            if more := self._folder_states(at):
                self.folder(path, f"{here}/", more, st)
        else:
            self.file(path, here, at, st)

    def file(self, path: Path, here: str, at: frozenset[int], st: os.stat_result) -> None:
        if not self._wanted(here, at):
            return
        if not stat.S_ISREG(st.st_mode):  # never opened: a FIFO would block the read
            self.listing.skip("special_files", str(path))
            return
        real = (st.st_dev, st.st_ino) if st.st_ino else str(path.resolve())
        if real in self.files:
            self.listing.skip("second_names", f"{path} (read as {self.files[real]})")
            return
        self.files[real] = str(path)
        self.listing.files.append(path)

    def _wanted(self, here: str, at: frozenset[int]) -> bool:
        return len(self.pattern) in at and self.selected(here)

    def _folder_states(self, at: frozenset[int]) -> frozenset[int]:
        return frozenset(i for i in at if i < len(self.pattern))

    def _first_visit(self, path: Path, states: frozenset[int], st: os.stat_result) -> bool:
        key = (st.st_dev, st.st_ino, states)
        if key in self.folders:
            self.listing.skip("folders_reached_again", f"{path} (walked as {self.folders[key]})")
            return False
        self.folders[key] = str(path)
        return True


def _stat(path: Path, follow: bool = True) -> os.stat_result:
    try:
        return os.stat(path, follow_symlinks=follow)
    except OSError as e:
        raise SourceError(f"{path}: cannot read ({e.strerror})") from e


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError as e:
        raise SourceError(f"{directory}: cannot read ({e.strerror})") from e


def _step(states: frozenset[int], name: str, pattern: tuple[str, ...]) -> frozenset[int]:
    """The pattern states after matching one more path part `name` (epsilon-closed); empty:
    nothing under it can match. A state i < len(pattern) waits for pattern[i]; len(pattern):
    the path so far matches the whole pattern."""
    hidden = name.startswith(".")
    out = set()
    for i in states:
        if i == len(pattern):
            continue
        part = pattern[i]
        if part == "**":
            if not hidden:
                out.add(i)
        elif fnmatch(name, part) and (not hidden or part.startswith(".")):
            out.add(i + 1)
    return _closure(frozenset(out), pattern)


def _closure(states: frozenset[int], pattern: tuple[str, ...]) -> frozenset[int]:
    """`**` also matches no folder at all: a state waiting for it waits for the next part."""
    out, todo = set(states), list(states)
    while todo:
        i = todo.pop()
        if i < len(pattern) and pattern[i] == "**" and i + 1 not in out:
            out.add(i + 1)
            todo.append(i + 1)
    return frozenset(out)
