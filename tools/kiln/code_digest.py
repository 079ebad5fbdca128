"""Which of kiln's own files a phase or an action depends on, found by its imports.

The code of a module is its source file, the kiln modules it imports (every
`import kiln...` and `from kiln... import ...`, in functions too, found by
parsing, but none under `if TYPE_CHECKING:`, which never runs), their packages'
`__init__.py`, transitively, and the data files a module declares it reads
(`__data_files__ = ("rules/*/templates/*.j2",)`, globs relative to the kiln
package). Nothing is hand-listed, so nothing is forgotten: a new helper module
is found through the import that uses it. A root ending in `.*` stands for every
module of that package and its subpackages (the rule catalogue imports its
modules by name).

    CodeStamp.of(roots)        the files and their stat data; `is_current()` costs
                               a stat per file. For caches of kiln's own work (the
                               graph and analysis caches): valid while the code that
                               made them is unchanged.
    content_digest(roots)      a digest of those files' contents, the same on every
                               machine: part of every Python action's key.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ast

KILN_ROOT = Path(__file__).resolve().parent
DATA_FILES = "__data_files__"


def _module_file(module: str) -> Path | None:
    """kiln.a.b -> kiln/a/b.py or kiln/a/b/__init__.py (under KILN_ROOT); None if neither."""
    base = KILN_ROOT.joinpath(*module.split(".")[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_modules(package: str) -> list[str]:
    """Every module under `package`, its subpackages' too (the catalogue's feature folders)."""
    folder = KILN_ROOT.joinpath(*package.split(".")[1:])
    return [
        ".".join([package, *p.relative_to(folder).with_suffix("").parts])
        for p in sorted(folder.rglob("*.py"))
        if p.stem != "__init__"
    ]


@cache
def _scan(module: str, path: Path) -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """(the kiln modules `module` names in its imports, the data files it declares)."""
    import ast  # only when a stamp is made: checking one stays cheap

    tree = ast.parse(path.read_bytes(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    data: list[Path] = []
    # Imports under `if TYPE_CHECKING:` never run: names for annotations only, as the
    # layering test reads them too (tests/unit/test_layering.py).
    annotations_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            names.append(base)
            # `from kiln.rules import torch_model` may import a module, not a name
            names += [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == DATA_FILES for t in node.targets
        ):
            for pattern in ast.literal_eval(node.value):
                data += sorted(p for p in KILN_ROOT.glob(pattern) if p.is_file())
    kiln = tuple(dict.fromkeys(n for n in names if n == "kiln" or n.startswith("kiln.")))
    return kiln, tuple(data)


def _is_type_checking(test: ast.expr) -> bool:
    import ast

    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


@cache
def files(roots: tuple[str, ...]) -> tuple[Path, ...]:
    """Every file the modules `roots` depend on (see the module docstring), sorted.

    Paths are under KILN_ROOT as Python imports them (rules/ through its symlink).
    """
    pending = [module for root in roots for module in _expand(root)]
    seen: set[str] = set()
    found: set[Path] = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        parent = module.rpartition(".")[0]
        if parent:
            pending.append(parent)  # importing a.b runs a/__init__.py first
        path = _module_file(module)
        if path is None:
            continue  # a name imported from a module, not a module
        found.add(path)
        imported, data = _scan(module, path)
        found.update(data)
        pending += imported
    return tuple(sorted(found))


def _expand(root: str) -> list[str]:
    if root.endswith(".*"):
        package = root[:-2]
        return [package, *_package_modules(package)]
    return [root]


@cache
def content_digest(roots: tuple[str, ...]) -> str:
    """A digest of the contents of files(roots), by their paths inside kiln: the same
    wherever kiln is installed."""
    digest = hashlib.sha256()
    for path in files(roots):
        name = path.relative_to(KILN_ROOT).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class CodeStamp:
    """kiln's files that some cached work was made with, and their stat data then."""

    roots: tuple[str, ...]
    stats: tuple[tuple[str, int, int, int, int], ...]  # (path, size, mtime_ns, ctime_ns, inode)

    @staticmethod
    def of(roots: tuple[str, ...]) -> CodeStamp:
        return CodeStamp(roots, tuple(_stat(str(path)) for path in files(roots)))

    def is_current(self) -> bool:
        return self.stats == tuple(_stat(path) for path, *_ in self.stats)


def _stat(path: str) -> tuple[str, int, int, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (path, -1, -1, -1, -1)
    return (path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
