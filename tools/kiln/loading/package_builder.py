"""Collecting the targets one BUILD file declares, as its rule calls happen.

A PackageBuilder is the state behind the native functions (rules, glob,
package, exports_files) while one BUILD file evaluates. Every check that can
be made at the call is made there, so the error carries the Starlark stack of
the offending call: attribute schema, labels, duplicate names, outputs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from kiln.errors import KilnError, LabelError, LoadingError
from kiln.label import Label, canonical, external_label, target_name_problem
from kiln.loading import attr_errors, glob
from kiln.loading.package import GENERATED_FILE, SOURCE_FILE, FileStamp, Target
from kiln.loading.visibility import PUBLIC
from kiln.loading.visibility import problem as visibility_problem
from kiln.rule_api.attrs import LABEL, OUTPUT

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from kiln.rule_api import Rule


class LocateTarget(Exception):
    """Raised by the rule call with this index when re-evaluating to find a location."""


class PackageBuilder:
    def __init__(
        self,
        package: str,
        package_dir: Path,
        *,
        locate_index: int | None = None,
        ignored: Callable[[str], bool] = lambda directory: False,
    ):
        self.package = package
        self.package_dir = package_dir
        self.ignored = ignored  # workspace-relative directory -> kiln never looks inside
        self.targets: dict[str, Target] = {}
        self.default_visibility: list[str] | None = None
        self.exported_files: set[str] = set()
        self.exported: dict[str, tuple[str, ...]] = {}  # file name -> its visibility
        # Directories glob() listed, relative to the package directory, each with
        # its stamp (workspace-relative) taken before the first listing.
        self.globbed_dirs: dict[str, FileStamp] = {}
        self.globbed_files: set[str] = set()  # every file glob() returned, likewise
        self.locate_index = locate_index
        self._package_called = False
        self._outputs: dict[str, str] = {}  # output path -> the rule declaring it
        self._inside: dict[str, str] = {}  # each directory above an output -> one such output
        self.pending: KilnError | None = None  # the error behind the next StarlarkError
        self.located = False
        self._next_index = 0

    # -- errors --------------------------------------------------------------

    def fail(self, message: str, *, label: str | None = None, hint: str | None = None) -> Exception:
        """Remember the real error and return an exception for starlark to unwind with."""
        self.pending = LoadingError(message, label=label, hint=hint)
        return RuntimeError(message)

    # -- native functions ----------------------------------------------------

    def call_rule(self, rule: Rule, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        index = self._next_index
        self._next_index += 1
        if self.locate_index == index:
            self.located = True
            raise LocateTarget()
        name = kwargs.get("name")
        if args:
            raise self.fail(f"{rule.name}() takes keyword arguments only")
        if name is None:
            raise self.fail(f"{rule.name}() is missing the mandatory attribute 'name'")
        if not isinstance(name, str):
            raise self.fail(f"attribute 'name' of {rule.name}() must be a string")
        label = self._label_of(name)
        if name in self.targets:
            raise self.fail(
                f"target '{name}' is declared twice in package '{self.package}'",
                label=label,
                hint="target names must be unique within a package (outputs count too)",
            )
        try:
            rule.attrs.model_validate(kwargs)
        except ValidationError as error:
            message, hint = attr_errors.describe(error, rule.attrs, rule.name)
            raise self.fail(message, label=label, hint=hint) from None

        attrs = dict(kwargs)
        deps: list[str] = []
        for field in rule.attrs.fields_marked(LABEL):
            value = attrs.get(field)
            if value is None:
                continue
            if isinstance(value, str):
                attrs[field] = self._resolve(value, field, rule, label)
                deps.append(attrs[field])
            else:
                attrs[field] = [self._resolve(v, field, rule, label) for v in value]
                deps.extend(attrs[field])
        if attrs.get("visibility") is not None:
            attrs["visibility"] = self._visibility(attrs["visibility"], f"{rule.name}()", label)
        elif self.default_visibility is not None:
            attrs["visibility"] = list(self.default_visibility)

        self.targets[name] = Target(label, rule.name, attrs, tuple(dict.fromkeys(deps)), index)
        for field in rule.attrs.fields_marked(OUTPUT):
            value = attrs.get(field)
            if value == [] and rule.attrs.model_fields[field].is_required():
                raise self.fail(
                    f"attribute '{field}' of {rule.name}() names no output: a {rule.name}() "
                    "without outputs would never run",
                    label=label,
                    hint=f'name the files it makes, as in {field} = ["{name}.txt"]',
                )
            for out in [value] if isinstance(value, str) else value or []:
                self._add_output(out, label, index, rule)

    def _add_output(self, out: str, rule_label: str, index: int, rule: Rule) -> None:
        try:
            out_label = Label.parse(out, self.package)
        except LabelError as error:
            raise self.fail(
                f"invalid output name '{out}': {error.message}", label=rule_label
            ) from None
        if out.startswith(("//", ":")) or out_label.package != self.package:
            raise self.fail(
                f"output '{out}' of {rule.name}() must be a plain file name in this package",
                label=rule_label,
            )
        if self._outputs.get(out) == rule_label:
            raise self.fail(
                f"output '{out}' is listed twice by {rule.name}()",
                label=rule_label,
                hint="name each output once",
            )
        if out in self.targets:
            raise self.fail(
                f"output '{out}' clashes with a target of the same name in package "
                f"'{self.package}'",
                label=rule_label,
            )
        self._check_nesting(out, rule_label)
        self.targets[out] = Target(
            str(out_label), GENERATED_FILE, {"generating_rule": rule_label}, (rule_label,), index
        )

    def _check_nesting(self, out: str, rule_label: str) -> None:
        """An output may not be a directory another output lies in: kiln-out/ cannot
        hold `d` as a file and `d/x` too (every build crashed on it)."""
        parts = out.split("/")
        for i in range(1, len(parts)):
            outer = "/".join(parts[:i])
            if outer in self._outputs:
                raise self._nesting_error(rule_label, out, rule_label, outer, self._outputs[outer])
        inner = self._inside.get(out)
        if inner is not None:
            raise self._nesting_error(rule_label, inner, self._outputs[inner], out, rule_label)
        self._outputs[out] = rule_label
        for i in range(1, len(parts)):
            self._inside.setdefault("/".join(parts[:i]), out)

    def _nesting_error(
        self, current: str, inner: str, inner_rule: str, outer: str, outer_rule: str
    ) -> Exception:
        return self.fail(
            f"output '{inner}' of {inner_rule} lies inside output '{outer}' of {outer_rule}: "
            f"'{outer}' cannot be both a file and a directory",
            label=current,
            hint="rename one of the two outputs",
        )

    def glob(self, include: Any, exclude: Any, allow_empty: Any) -> list[str]:
        for arg, value in (("include", include), ("exclude", exclude)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.fail(f"glob(): '{arg}' must be a list of strings")
        for pattern in [*include, *exclude]:
            problem = glob.check_pattern(pattern)
            if problem:
                raise self.fail(f"glob(): {problem}")
        prefix = f"{self.package}/" if self.package else ""
        now = time.time_ns()  # before the first stat: see FileStamp
        try:
            matches, listed = glob.glob(
                self.package_dir, include, exclude, lambda rel: self.ignored(prefix + rel)
            )
        except OSError as error:
            raise self.fail(f"glob(): cannot list {error.filename}: {error.strerror}") from None
        except glob.GlobTooLarge:
            raise self.fail(
                f"glob({include}) examined more than {glob.MAX_ENTRIES:,} directory entries "
                f"in package '{self.package}'",
                hint="symlinks inside the package may lead into the same directories again "
                "and again; narrow the pattern, or list the directory in .kilnignore",
            ) from None
        for rel, st in listed.items():
            if rel not in self.globbed_dirs:
                path = f"{prefix}{rel}" if rel else self.package
                self.globbed_dirs[rel] = FileStamp.from_stat(path, st, now)
        self.globbed_files.update(matches)
        if not matches and allow_empty is False:
            raise self.fail(
                f"glob({include}) matched no files in package '{self.package}'",
                hint="pass allow_empty = True if an empty result is expected",
            )
        return matches

    def set_package(self, kwargs: dict[str, Any]) -> None:
        unknown = set(kwargs) - {"default_visibility", "default_testonly"}
        if unknown:
            raise self.fail(f"package() got an unknown argument '{sorted(unknown)[0]}'")
        if self.targets:
            raise self.fail("package() must be called before any target is declared")
        if self._package_called:
            raise self.fail(
                "package() may be called only once per BUILD file",
                hint="merge the arguments into the first package() call",
            )
        self._package_called = True
        visibility = kwargs.get("default_visibility")
        if visibility is not None:
            if not isinstance(visibility, list) or not all(isinstance(v, str) for v in visibility):
                raise self.fail("package(): default_visibility must be a list of labels")
            self.default_visibility = self._visibility(visibility, "package()", None)

    def exports_files(self, srcs: Any, visibility: Any) -> None:
        if not isinstance(srcs, list) or not all(isinstance(s, str) for s in srcs):
            raise self.fail("exports_files(): srcs must be a list of file names")
        if visibility is None:
            granted: tuple[str, ...] = (PUBLIC,)
        elif isinstance(visibility, list) and all(isinstance(v, str) for v in visibility):
            granted = tuple(self._visibility(visibility, "exports_files()", None))
        else:
            raise self.fail("exports_files(): visibility must be a list of labels")
        for src in srcs:
            label = self._resolve(src, "exports_files()", None, None)
            if not label.startswith(f"//{self.package}:"):
                raise self.fail(f"exports_files(): '{src}' is not a file of this package")
            self.exported_files.add(label)
            self.exported[label[label.index(":") + 1 :]] = granted

    def _visibility(self, entries: list[str], where: str, owner: str | None) -> list[str]:
        """The entries made canonical (':__pkg__' is this package's), each one checked."""
        labels = []
        for entry in entries:
            label = self._resolve(entry, f"visibility of {where}", None, owner)
            problem = visibility_problem(label)
            if problem is not None:
                raise self.fail(f"{where}: {problem}", label=owner)
            labels.append(label)
        return labels

    # -- helpers --------------------------------------------------------------

    def _label_of(self, name: str) -> str:
        problem = target_name_problem(name)
        if problem is not None:
            raise self.fail(f"invalid target name {name!r}: {problem}")
        return str(Label(self.package, name))

    def _resolve(self, text: str, field: str, rule: Rule | None, owner: str | None) -> str:
        try:
            return external_label(text) or canonical(text, self.package)
        except LabelError as error:
            where = f"attribute '{field}' of {rule.name}()" if rule else field
            raise self.fail(f"{where}: {error.message}", label=owner) from None

    def source_file_target(self, label: str) -> Target:
        return Target(label, SOURCE_FILE, {}, ())
