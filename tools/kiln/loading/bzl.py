"""Loading .bzl files: evaluated once per process, frozen, shared by every BUILD file.

`load("//tools:macros.bzl", "m", alias = "other")` is resolved relative to
the file that loads it. In a .bzl file `def` is allowed and the rules are
reached as `native.<rule>`, as in Bazel.

`load("@kiln//rules:defs.bzl", "aoti_package", ...)`, the line a BUILD file
shared with Bazel starts with, is answered with kiln's built-in rules without
reading any file (Bazel reads rules/defs.bzl, generated from the same rules).
Every other external repository is an error.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

import starlark as sl

from kiln.errors import KilnError, LabelError, LoadingError, Location
from kiln.file_io import read_text
from kiln.label import Label
from kiln.loading import natives, nesting, rust_panics, starlark_errors
from kiln.loading.package import FileStamp
from kiln.loading.workspace import Workspace
from kiln.rules import BAZEL_NATIVE, DEFS_BZL, NOT_IN_BAZEL, exported_rules


def build_dialect() -> sl.Dialect:
    dialect = sl.Dialect.standard()
    dialect.enable_def = False
    dialect.enable_lambda = False
    dialect.enable_top_level_stmt = False  # no top-level if/for in BUILD files, as in Bazel
    dialect.enable_load = True
    return dialect


def bzl_dialect() -> sl.Dialect:
    dialect = sl.Dialect.standard()
    dialect.enable_def = True
    dialect.enable_lambda = True
    dialect.enable_load = True
    return dialect


class BzlLoader:
    """Evaluates and caches .bzl modules; remembers which files each one read."""

    def __init__(self, workspace: Workspace, table: dict[str, Callable[..., Any]]):
        self.workspace = workspace
        self.table = table
        self.globals = sl.Globals.extended_by([sl.LibraryExtension.StructType])
        self.modules: dict[str, sl.FrozenModule] = {}
        self.files: dict[str, frozenset[str]] = {}  # .bzl label -> files it and its loads read
        self._loading: list[str] = []
        self.stamps: dict[str, FileStamp] = {}  # .bzl path -> its stamp when read
        # The error behind the StarlarkError that a failing load() callback causes.
        self.pending: KilnError | None = None
        self._native_source = "native = struct({})\n".format(
            ", ".join(f"{name} = {name}" for name in sorted(table))
        )
        self._kiln_defs: sl.FrozenModule | None = None

    def resolve(self, module_id: str, from_package: str, from_file: str) -> Label:
        try:
            label = Label.parse(module_id, from_package)
        except LabelError as error:
            external = module_id.startswith("@") and not module_id.startswith(("@//", "@@//"))
            raise LoadingError(
                f"invalid load() label: {error.message}",
                location=Location(from_file),
                hint=f"the one external label kiln loads is {DEFS_BZL}" if external else None,
            ) from None
        if not label.name.endswith(".bzl"):
            raise LoadingError(
                f"load() of '{module_id}': only .bzl files can be loaded",
                location=Location(from_file),
            )
        return label

    def file_loader(
        self, from_package: str, from_file: str, read: set[str], loads: Sequence[Any] = ()
    ) -> sl.FileLoader:
        """A FileLoader for one file's load() statements (`loads`: its AST's, to check
        the names asked of @kiln//rules:defs.bzl); adds what it reads to `read`."""
        wanted = [
            s
            for statement in loads
            if statement.module_id == DEFS_BZL
            for s in statement.symbols.values()
        ]

        def load(module_id: str) -> sl.FrozenModule:
            try:
                if module_id == DEFS_BZL:
                    return self.kiln_defs(wanted, from_file)
                label = self.resolve(module_id, from_package, from_file)
                module = self.load(label)
            except KilnError as error:
                self.pending = error
                raise
            read.update(self.files[str(label)])
            return module

        return sl.FileLoader(load)

    def kiln_defs(self, symbols: Sequence[str], from_file: str) -> sl.FrozenModule:
        """@kiln//rules:defs.bzl: the catalogue's rules, but Bazel's own (genrule, filegroup)."""
        exported = exported_rules()
        unknown = [name for name in symbols if name not in exported]
        if unknown:
            hint = f"it defines {', '.join(exported)}"
            close = difflib.get_close_matches(unknown[0], exported, n=1)
            if unknown[0] in BAZEL_NATIVE:
                hint = f"{unknown[0]} is Bazel's own rule: call it without load(); {hint}"
            elif unknown[0] in NOT_IN_BAZEL:  # none now; a new rule may start there
                hint = (
                    f"{unknown[0]} is kiln's only (the Bazel rule set has none yet): call it "
                    f"without load(), in a BUILD file kiln alone builds; {hint}"
                )
            elif close:
                hint = f"did you mean '{close[0]}'? {hint}"
            raise LoadingError(
                f"load(): {DEFS_BZL} has no symbol '{unknown[0]}'",
                location=Location(from_file),
                hint=hint,
            )
        if self._kiln_defs is None:
            module = sl.Module()
            for name in exported:
                module.add_callable(name, self.table[name])
            self._kiln_defs = module.freeze()
        return self._kiln_defs

    def load(self, label: Label) -> sl.FrozenModule:
        key = str(label)
        if key in self.modules:
            return self.modules[key]
        if key in self._loading:
            cycle = " -> ".join([*self._loading[self._loading.index(key) :], key])
            raise LoadingError(f"cycle in load() statements: {cycle}")
        rel = f"{label.package}/{label.name}" if label.package else label.name
        root = str(self.workspace.root)
        # As in Bazel, a .bzl file belongs to a package: the BUILD file is read
        # (and stamped) too, so that its removal is noticed.
        build_file = self.workspace.build_file(label.package)
        if build_file is None:
            where = f"{label.package}/" if label.package else "the workspace root"
            raise LoadingError(
                f"cannot load '{key}': there is no package '{label.package}' (no BUILD file "
                f"in {where})",
                hint=f"add a BUILD file to {where}, or load the file by the label of the "
                "package it lies in",
            )
        self.stamps[build_file] = FileStamp.of(root, build_file)
        self.stamps[rel] = FileStamp.of(root, rel)
        try:
            source = read_text(self.workspace.path(rel))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise LoadingError(f"cannot load '{key}': file {rel} does not exist") from None
        except OSError as error:
            raise LoadingError(f"cannot load '{key}': {error.strerror}") from None
        except UnicodeDecodeError as error:
            raise LoadingError(
                f"cannot load '{key}': {rel} is not valid UTF-8 (byte {error.start})"
            ) from None
        nesting.check(source, rel)
        self._loading.append(key)
        read = {rel, build_file}
        message: str | None = None
        try:
            frozen = self._evaluate(label, rel, source, read)
        except sl.StarlarkError as error:
            raise self._translate(error, rel) from None
        except rust_panics.StarlarkPanic as panic:
            message = panic.message
        finally:
            self._loading.pop()
        if message is not None:
            raise self._panic_error(message, label, rel, source)
        self.modules[key] = frozen
        self.files[key] = frozenset(read)
        return frozen

    def _evaluate(self, label: Label, rel: str, source: str, read: set[str]) -> sl.FrozenModule:
        module = self._module()
        with rust_panics.calls_into_starlark():
            ast = sl.parse(rel, source, bzl_dialect())
            loader = self.file_loader(label.package, rel, read, ast.loads())
            # No package is being built while a .bzl file's top level runs, even
            # when a BUILD file's load() got us here: rules called now would
            # otherwise land in that package (and only on the first load).
            with natives.building(None):
                sl.eval(module, ast, self.globals, loader)
        return module.freeze()

    def _module(self) -> sl.Module:
        """A module for a .bzl file: the native functions, also as `native.<name>`."""
        module = sl.Module()
        natives.add_to(module, self.table)
        with rust_panics.calls_into_starlark():
            sl.eval(module, sl.parse("<prelude>", self._native_source, bzl_dialect()), self.globals)
        return module

    def _panic_error(self, message: str, label: Label, rel: str, source: str) -> KilnError:
        """Where the panic happened: the .bzl file's statements evaluated one by one."""
        rust_panics.release_failed_run()
        module = self._module()
        loader = self.file_loader(label.package, rel, set())

        def run(text: str) -> None:
            with natives.building(None):
                sl.eval(module, sl.parse(rel, text, bzl_dialect()), self.globals, loader)

        line = rust_panics.panicking_line(nesting.statements(source), run)
        return LoadingError(
            rust_panics.describe(message),
            location=Location(rel, line, 1) if line else Location(rel),
            hint="build a smaller value; the evaluator cannot report this as a Starlark error",
        )

    def take_pending(self) -> KilnError | None:
        pending, self.pending = self.pending, None
        return pending

    def _translate(self, error: sl.StarlarkError, rel: str) -> KilnError:
        text = str(error)
        pending = self.take_pending()
        if pending is None:
            return starlark_errors.to_loading_error(text, sorted(self.table))
        pending.location = starlark_errors.in_file(pending.location, text, rel)
        return pending
