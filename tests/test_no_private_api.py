"""packlm uses Lightning, torch and TensorBoard through their public API only: every private
name of theirs is reached through `packlm.runtime.shims` (issue #34).

Three checks over src/ and bench/ (and tests/conftest.py), packlm/runtime/shims.py left out:
- no `from <lib> import _name` / `import <lib>._module`;
- no `obj._name` where `_name` is not one of packlm's own (defined or assigned in its code);
- no class of packlm that subclasses a class of those libraries defines, reads or assigns a
  `_name` the library class has (an override of a private method, a private attribute).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("lightning", "pytorch_lightning", "lightning_fabric", "torch", "tensorboard")
SHIM = ROOT / "src" / "packlm" / "runtime" / "shims.py"
PUBLIC_UNDERSCORED = {"_exit", "_asdict", "_replace", "_fields", "_make", "_field_defaults"}
"""Documented names that start with an underscore (os._exit, namedtuple's methods)."""

PENDING = {
    (
        "src/packlm/commands/export/tiktoken_ranks.py",
        "_pat_str",
    ): "tiktoken's, not one of LIBRARIES",
    ("src/packlm/data/store/encode.py", "_processes"): "concurrent.futures', not one of LIBRARIES",
}
"""Uses in files of other owners (model/, data/, export/), each with its replacement: an
entry is removed with the use (the test fails on an entry that no longer matches)."""

PENDING_IN_CLASSES: dict[str, str] = {}


def sources() -> list[Path]:
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    files.append(ROOT / "tests" / "conftest.py")
    return sorted(p for p in files if p != SHIM)


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def own_names(trees: dict[Path, ast.AST]) -> set[str]:
    """Underscored names packlm itself defines: functions, classes, assigned names and attributes."""
    names = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
            elif (  # setattr(obj, "_name", ...), object.__setattr__(obj, "_name", ...)
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None))
                in ("setattr", "__setattr__")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
            ):
                names.add(node.args[1].value)
    return {n for n in names if private(n)}


def from_library(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] in LIBRARIES


def test_no_private_name_of_lightning_torch_or_tensorboard_outside_the_shim():
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sources()}
    own = own_names(trees)
    found = {}
    for path, tree in trees.items():
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and from_library(node.module):
                parts = [*node.module.split("."), *(a.name for a in node.names)]
                hits = [p for p in parts if private(p)]
            elif isinstance(node, ast.Import):
                hits = [
                    p for a in node.names if from_library(a.name) for p in a.name.split(".")
                    if private(p)
                ]  # fmt: skip
            elif isinstance(node, ast.Attribute) and private(node.attr):
                hits = [] if node.attr in own | PUBLIC_UNDERSCORED else [node.attr]
            else:
                continue
            for name in hits:
                found.setdefault((rel, name), node.lineno)
    unexpected = {k: line for k, line in found.items() if k not in PENDING}
    assert not unexpected, "private names used outside packlm/runtime/shims.py: " + ", ".join(
        f"{file}:{line} {name}" for (file, name), line in sorted(unexpected.items())
    )
    stale = set(PENDING) - set(found)
    assert not stale, f"PENDING entries that no longer occur (remove them): {sorted(stale)}"


def packlm_classes() -> list[type]:
    classes = []
    for path in sorted((ROOT / "src" / "packlm").rglob("*.py")):
        rel = path.relative_to(ROOT / "src").with_suffix("")
        if rel.name == "__main__" or path == SHIM:
            continue
        name = ".".join(rel.parts).removesuffix(".__init__")
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__module__ == name:
                classes.append(obj)
    return classes


def library_bases(cls: type) -> list[type]:
    return [b for b in cls.__mro__[1:] if from_library(b.__module__)]


def names_in(cls: type) -> set[str]:
    """The underscored names a class defines in its body, or reads or assigns on `self`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    (body,) = tree.body
    names = set()
    for node in body.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    names = {n for n in names if private(n)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
            and private(node.attr)
        ):
            names.add(node.attr)
    return names


def library_has(base: type, name: str) -> bool:
    if name in vars(base) or f"_{base.__name__.lstrip('_')}{name}" in vars(base):
        return True
    try:
        source = inspect.getsource(base)
    except (OSError, TypeError):
        return False
    return f"self.{name}" in source


def test_no_class_of_packlm_overrides_or_touches_a_private_name_of_its_library_base():
    touched = []
    for cls in packlm_classes():
        bases = library_bases(cls)
        if not bases:
            continue
        for name in sorted(names_in(cls)):
            mangled = "__" in name[1:] and name.split("__", 1)[0].lstrip("_")
            for base in bases:
                if mangled or library_has(base, name):
                    touched.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
                    break
    unexpected = [t for t in touched if t not in PENDING_IN_CLASSES]
    assert not unexpected, "private names of a library base class: " + ", ".join(unexpected)
    stale = set(PENDING_IN_CLASSES) - set(touched)
    assert not stale, f"PENDING_IN_CLASSES entries that no longer occur: {sorted(stale)}"
