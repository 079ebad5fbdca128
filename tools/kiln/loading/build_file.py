"""Evaluating one BUILD file into a Package, in real Starlark (starlark-pyo3).

BUILD files use a restricted dialect: no `def`, no lambda, no top-level
`if`/`for`. They see the rules of the catalogue, glob(), package() and
exports_files(), and can load() .bzl files; they can do no other I/O and
import nothing.
"""

from __future__ import annotations

import starlark as sl

from kiln.errors import KilnError, LoadingError, Location
from kiln.loading import natives, starlark_errors
from kiln.loading.bzl import BzlLoader, build_dialect
from kiln.loading.package import FileStamp, Package
from kiln.loading.package_builder import PackageBuilder
from kiln.loading.workspace import Workspace


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
        prefix = f"{package}/" if package else ""
        stamps += [
            FileStamp.of(self.root, f"{prefix}{d}" if d else package)
            for d in sorted(builder.globbed_dirs)
        ]
        return Package(
            name=package,
            build_file=build_file,
            targets=builder.targets,
            default_visibility=builder.default_visibility,
            stamps=tuple(stamps),
            source_files=tuple(sorted(builder.exported_files)),
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
            source = self.workspace.path(build_file).read_text()
        except OSError as error:
            raise LoadingError(f"cannot read {build_file}: {error.strerror}") from None
        builder = PackageBuilder(package, self.workspace.path(package), locate_index=locate_index)
        read: set[str] = set()
        module = sl.Module()
        natives.add_to(module, self.table)
        try:
            ast = sl.parse(build_file, source, self.dialect)
            with natives.building(builder):
                sl.eval(module, ast, self.globals, self.bzl.file_loader(package, build_file, read))
        except sl.StarlarkError as error:
            text = str(error)
            if builder.located:
                raise _Located(starlark_errors.location_from(text)) from None
            raise self._error(text, builder) from None
        return builder, read

    def _error(self, text: str, builder: PackageBuilder) -> KilnError:
        error = builder.pending or self.bzl.take_pending()
        if error is None:
            return starlark_errors.to_loading_error(text, sorted(self.table))
        if error.location is None:
            error.location = starlark_errors.location_from(text)
            error.details = text
        return error


class _Located(Exception):
    def __init__(self, location: Location | None):
        super().__init__()
        self.location = location
