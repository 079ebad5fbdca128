"""Evaluating one BUILD file into a Package, in real Starlark (starlark-pyo3).

BUILD files use a restricted dialect: no `def`, no lambda, no top-level
`if`/`for`. They see the rules of the catalogue, glob(), package() and
exports_files(), and can load() .bzl files; they can do no other I/O and
import nothing.
"""

from __future__ import annotations

import re

import starlark as sl

from kiln.errors import KilnError, LoadingError, Location
from kiln.file_io import read_text
from kiln.label import target_name_problem
from kiln.loading import natives, nesting, rust_panics, source_files, starlark_errors
from kiln.loading.bzl import BzlLoader, build_dialect
from kiln.loading.package import GENERATED_FILE, FileStamp, Package, Target
from kiln.loading.package_builder import PackageBuilder
from kiln.loading.workspace import IGNORE_FILE, Workspace


class BuildFileEvaluator:
    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        self.root = str(workspace.root)
        self.table = natives.functions()
        self.bzl = BzlLoader(workspace, self.table)
        self.globals = sl.Globals.standard()
        self.dialect = build_dialect()

    def evaluate(self, package: str, build_file: str) -> Package:
        stamp = FileStamp.of(self.root, build_file)
        builder, read = self._run(package, build_file, locate_index=None)
        stamps = [stamp]
        stamps += [self.bzl.stamps[path] for path in sorted(read)]
        # Files glob() did not list are looked up below, in directories stamped first.
        referenced = source_files.referenced(package, builder.targets)
        unlisted = referenced - builder.globbed_files
        prefix = f"{package}/" if package else ""
        outputs = [t for t in builder.targets.values() if t.kind == GENERATED_FILE]
        stamps += [builder.globbed_dirs[d] for d in sorted(builder.globbed_dirs)]
        looked_up = source_files.lookup_dirs([*unlisted, *(t.name for t in outputs)])
        stamps += [
            FileStamp.of(self.root, f"{prefix}{d}" if d else package)
            for d in sorted(looked_up - builder.globbed_dirs.keys())
        ]
        self._check_outputs_shadow_no_source(package, build_file, outputs)
        if builder.globbed_dirs:  # .kilnignore decides which directories glob() entered
            stamps.append(FileStamp.of(self.root, IGNORE_FILE))
        package_dir = str(self.workspace.path(package))
        return Package(
            name=package,
            build_file=build_file,
            targets=builder.targets,
            default_visibility=builder.default_visibility,
            stamps=tuple(stamps),
            source_files=tuple(sorted(builder.exported_files)),
            exported=builder.exported,
            files=frozenset(
                name
                for name in referenced
                if name in builder.globbed_files or source_files.on_disk(package_dir, name)
            ),
        )

    def _check_outputs_shadow_no_source(
        self, package: str, build_file: str, outputs: list[Target]
    ) -> None:
        """An output named like a file of the package would hide it (Bazel: "generated file
        ... conflicts with existing source file"). Its directories are stamped already."""
        package_dir = str(self.workspace.path(package))
        for output in outputs:
            if source_files.on_disk(package_dir, output.name):
                rule = output.deps[0]
                raise LoadingError(
                    f"output '{output.name}' of {rule} has the name of a source file of "
                    f"package '{package}'",
                    location=self.locate(package, build_file, output.index),
                    label=rule,
                    hint="rename the output (or the source file)",
                )

    def locate(self, package: str, build_file: str, index: int) -> Location | None:
        """Where the target declared `index`-th in the package was declared.

        Re-evaluates the BUILD file and stops at that rule call; the Starlark
        stack then names the BUILD line (and the macro frames beneath it).
        Cheap, and only needed when an error must point at a target.
        """
        try:
            self._run(package, build_file, locate_index=index)
        except _Located as located:
            return located.location
        except KilnError:
            return Location(build_file)
        return Location(build_file)

    def _run(
        self, package: str, build_file: str, locate_index: int | None
    ) -> tuple[PackageBuilder, set[str]]:
        try:
            source = read_text(self.workspace.path(build_file))
        except OSError as error:
            raise LoadingError(
                f"cannot read {build_file}: {error.strerror}", location=Location(build_file)
            ) from None
        except UnicodeDecodeError as error:
            raise LoadingError(
                f"{build_file} is not valid UTF-8 (byte {error.start})",
                location=Location(build_file),
            ) from None
        try:
            nesting.check(source, build_file)
        except LoadingError as error:
            error.label = _declared_in_statement(package, source, error.location)
            raise
        builder = PackageBuilder(
            package,
            self.workspace.path(package),
            locate_index=locate_index,
            ignored=self.workspace.is_ignored,
        )
        read: set[str] = set()
        try:
            self._eval(builder, build_file, source, read)
        except sl.StarlarkError as error:
            text = str(error)
            if builder.located:
                location = starlark_errors.location_from(text)
                raise _Located(_with_column(location, build_file, source)) from None
            raise self._error(text, builder, build_file, source) from None
        except rust_panics.StarlarkPanic as panic:
            message = panic.message
        else:
            return builder, read
        raise self._panic_error(message, builder.package, build_file, source)

    def _eval(self, builder: PackageBuilder, build_file: str, source: str, read: set[str]) -> None:
        module = sl.Module()
        natives.add_to(module, self.table)
        with rust_panics.calls_into_starlark():
            ast = sl.parse(build_file, source, self.dialect)
            with natives.building(builder):
                loader = self.bzl.file_loader(builder.package, build_file, read, ast.loads())
                sl.eval(module, ast, self.globals, loader)

    def _panic_error(self, message: str, package: str, build_file: str, source: str) -> KilnError:
        """Where the panic happened: the BUILD file's statements evaluated one by one."""
        rust_panics.release_failed_run()
        module = sl.Module()
        natives.add_to(module, self.table)
        builder = PackageBuilder(
            package, self.workspace.path(package), ignored=self.workspace.is_ignored
        )
        loader = self.bzl.file_loader(package, build_file, set())

        def run(text: str) -> None:
            with natives.building(builder):
                sl.eval(module, sl.parse(build_file, text, self.dialect), self.globals, loader)

        line = rust_panics.panicking_line(nesting.statements(source), run)
        location = _with_column(Location(build_file, line or 0), build_file, source)
        error = LoadingError(
            rust_panics.describe(message),
            location=location,
            hint="build a smaller value; the evaluator cannot report this as a Starlark error",
        )
        name = starlark_errors.target_name_at(source, location) if location and line else None
        if name is not None and target_name_problem(name) is None:
            error.label = f"//{package}:{name}"
        return error

    def _error(self, text: str, builder: PackageBuilder, build_file: str, source: str) -> KilnError:
        error = builder.pending or self.bzl.take_pending()
        if error is None:
            error = starlark_errors.to_loading_error(text, sorted(self.table))
        elif error.location is None or not error.location.line:
            error.location = starlark_errors.in_file(error.location, text, build_file)
            error.details = text
        error.location = _with_column(error.location, build_file, source)
        if error.label is None and error.location and error.location.file == build_file:
            name = starlark_errors.target_name_at(source, error.location)
            if name is not None and target_name_problem(name) is None:
                error.label = f"//{builder.package}:{name}"
        return error


def _with_column(location: Location | None, build_file: str, source: str) -> Location | None:
    """A location in this BUILD file gets a column when the Starlark stack had none."""
    if location is None or location.file != build_file:
        return location
    return starlark_errors.with_column(location, source)


_NAME = re.compile(r"""\bname\s*=\s*(["'])([^"'\n]*)\1""")


def _declared_in_statement(package: str, source: str, location: Location | None) -> str | None:
    """The target the statement at `location` declares, found without parsing it
    (Python's parser gives up on nesting as deep as starlark-rust's does)."""
    if location is None:
        return None
    for line, text in reversed(nesting.statements(source)):
        if line <= location.line:
            found = _NAME.search(text)
            if found and target_name_problem(found.group(2)) is None:
                return f"//{package}:{found.group(2)}"
            return None
    return None


class _Located(Exception):
    def __init__(self, location: Location | None):
        super().__init__()
        self.location = location
