"""The target graph: every target reachable from the requested ones, checked.

Building it loads each package the closure touches, turns references to
plain files into source-file targets, and rejects dangling references and
dependency cycles, each with the file, line and label of the referring
target; and, for builds, dependencies their targets may not see.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from kiln.errors import KilnError, LoadingError
from kiln.loading import visibility
from kiln.loading.loader import NoSuchPackage, PackageLoader
from kiln.loading.package import SOURCE_FILE, Target
from kiln.loading.workspace import BUILD_FILES


@dataclass
class TargetGraph:
    targets: dict[str, Target]  # label -> target, for the whole closure
    roots: list[str]
    _rdeps: dict[str, list[str]] | None = field(default=None, repr=False)

    def rdeps(self) -> dict[str, list[str]]:
        if self._rdeps is None:
            reverse: dict[str, list[str]] = {label: [] for label in self.targets}
            for label, target in self.targets.items():
                for dep in target.deps:
                    reverse[dep].append(label)
            self._rdeps = reverse
        return self._rdeps


def split(label: str) -> tuple[str, str]:
    """("pkg", "name") of "//pkg:name"; ("@pip//timm", "timm") of "@pip//timm:timm"."""
    colon = label.index(":")
    return label[:colon].removeprefix("//"), label[colon + 1 :]


class GraphBuilder:
    def __init__(self, loader: PackageLoader, *, check_visibility: bool = True):
        self.loader = loader
        self.root = str(loader.workspace.root)
        # Builds check it; `kiln query` does not, as in Bazel (see visibility.py).
        self.check_visibility = check_visibility

    def build(
        self, roots: list[str], *, on_error: Callable[[KilnError], None] | None = None
    ) -> TargetGraph:
        """The closure of `roots`, checked. With on_error (--keep_going), a root whose
        closure fails to load (a broken package, a dangling or invisible dependency, a
        cycle) is reported and left out of the graph's roots; the other roots and their
        closures stay. Roots sharing a broken package report the same error each."""
        if on_error is None:
            return self._build(roots)
        kept: list[str] = []
        targets: dict[str, Target] = {}
        for root in roots:
            try:
                closure = self._build([root])
            except KilnError as error:
                on_error(error)
                continue
            kept.append(root)
            targets.update(closure.targets)
        return TargetGraph(targets, kept)

    def _build(self, roots: list[str]) -> TargetGraph:
        targets: dict[str, Target] = {}
        for root in roots:
            if root not in targets:
                targets[root] = self.resolve(root, None)
        stack = list(roots)
        while stack:
            target = targets[stack.pop()]
            for dep in target.deps:
                if dep not in targets:
                    targets[dep] = self.resolve(dep, target)
                    stack.append(dep)
        self._check_cycles(targets, roots)
        if self.check_visibility:
            visibility.check(targets, self.loader.package, self.loader.location_of)
        return TargetGraph(targets, roots)

    def resolve(self, label: str, referrer: Target | None) -> Target:
        package_name, name = split(label)
        try:
            package = self.loader.package(package_name)
        except NoSuchPackage as error:
            if referrer is None:
                raise
            raise self._error(
                referrer, f"{self._attr(referrer, label)}: {error.message}", hint=error.hint
            ) from None
        found = package.targets.get(name)
        if found is not None:
            return found
        if name in package.files:  # found on disk when the package was evaluated
            return Target(label, SOURCE_FILE, {}, ())
        path = os.path.join(self.root, package_name, name)
        if not label.startswith("@") and os.path.isfile(path):
            crossing = self._subpackage_of(package_name, name)
            if crossing is not None and referrer is not None:
                raise self._error(
                    referrer,
                    f"{self._attr(referrer, label)}: '{name}' crosses into package '{crossing}'",
                    hint=f"refer to it as '//{crossing}:"
                    f"{self._below(crossing, package_name, name)}'",
                )
            return Target(label, SOURCE_FILE, {}, ())
        not_a_file = _not_a_file(path, name)
        if not_a_file is not None and referrer is not None:
            what, fix = not_a_file
            raise self._error(
                referrer,
                f"{self._attr(referrer, label)}: '{name}' is {what}, not a source file",
                hint=fix,
            )
        import difflib  # only on the way to an error

        close = difflib.get_close_matches(name, list(package.targets), n=1)
        hint = f"did you mean '{close[0]}'?" if close else None
        if referrer is None:
            raise LoadingError(
                f"no such target '{label}': package '{package_name}' declares no target "
                f"'{name}' and has no file of that name",
                hint=hint,
            )
        attr = self._attr_name(referrer, label)
        if "." in name.rsplit("/", 1)[-1]:  # looks like a file: say so, as Bazel does
            message = f"{attr}: missing input file '{label}'"
        else:
            message = (
                f"{attr}: no such target '{label}': package '{package_name}' declares no "
                f"target '{name}' and has no file of that name"
            )
        raise self._error(referrer, message, hint=hint)

    def _subpackage_of(self, package: str, name: str) -> str | None:
        parts = name.split("/")[:-1]
        for i in range(len(parts), 0, -1):
            sub = "/".join(filter(None, [package, *parts[:i]]))
            if any(os.path.isfile(os.path.join(self.root, sub, b)) for b in BUILD_FILES):
                return sub
        return None

    @staticmethod
    def _below(subpackage: str, package: str, name: str) -> str:
        full = f"{package}/{name}" if package else name
        return full[len(subpackage) + 1 :]

    @staticmethod
    def _attr(referrer: Target, label: str) -> str:
        return f"{GraphBuilder._attr_name(referrer, label)} refers to '{label}'"

    @staticmethod
    def _attr_name(referrer: Target, label: str) -> str:
        for attr, value in referrer.attrs.items():
            if value == label or (isinstance(value, list) and label in value):
                return f"attribute '{attr}'"
        return "a dependency"

    def _error(self, referrer: Target, message: str, hint: str | None = None) -> KilnError:
        return LoadingError(
            message,
            location=self.loader.location_of(referrer),
            label=referrer.label,
            hint=hint,
        )

    def _check_cycles(self, targets: dict[str, Target], roots: list[str]) -> None:
        done: set[str] = set()
        for root in roots:
            if root in done:
                continue
            # Iterative DFS: the path is the current chain of (label, next dep index).
            path: list[tuple[str, int]] = [(root, 0)]
            on_path = {root}
            while path:
                label, i = path[-1]
                deps = targets[label].deps
                if i == len(deps):
                    path.pop()
                    on_path.discard(label)
                    done.add(label)
                    continue
                path[-1] = (label, i + 1)
                dep = deps[i]
                if dep in on_path:
                    chain = [entry[0] for entry in path]
                    self._report_cycle(targets, chain[chain.index(dep) :])
                if dep not in done:
                    path.append((dep, 0))
                    on_path.add(dep)

    def _report_cycle(self, targets: dict[str, Target], cycle: list[str]) -> None:
        lines = [f".-> {cycle[0]}", *(f"|   {label}" for label in cycle[1:]), f"`-- {cycle[0]}"]
        first = targets[cycle[0]]
        raise LoadingError(
            "cycle in dependency graph:\n    " + "\n    ".join(lines),
            location=self.loader.location_of(first),
            label=first.label,
            hint="break the cycle by removing one of these dependencies",
        )


def _not_a_file(path: str, name: str) -> tuple[str, str] | None:
    """What is at `path` if it exists but is no regular file, and what to do instead."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except OSError as error:
            if error.errno == errno.ELOOP:
                return "a symlink loop", "point the link at a file"
            return "a symlink to nothing", "point the link at a file, or remove it"
    if stat.S_ISDIR(st.st_mode):
        return "a directory", f'name the files in it, or use glob(["{name}/**"])'
    if stat.S_ISFIFO(st.st_mode):
        return "a FIFO", "actions read whole files: write the data to a regular file"
    if stat.S_ISSOCK(st.st_mode):
        return "a socket", "actions read whole files: use a regular file"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "a device", "actions read whole files: use a regular file"
    return None
