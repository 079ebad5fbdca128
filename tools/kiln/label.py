"""Labels and target patterns, written exactly as Bazel writes them.

A Label names one target: `//pkg/path:name`. In BUILD files and on the
command line shorter forms are accepted and resolved against the current
package: `//pkg` (means `//pkg:pkg`), `:name`, and `name`.

A TargetPattern names a set of targets on the command line:
`//pkg:name`, `//pkg:all` (rules of one package), `//pkg:*` or
`//pkg:all-targets` (rules and files), `//pkg/...` (rules of every package
beneath), `//...:*`, and a leading `-` to subtract.

This module is pure: it knows nothing of the filesystem. Where Bazel consults
the disk (`foo/bar` on the command line may mean `//foo/bar:bar` or
`//foo:bar`), the pattern says so and loading resolves it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from kiln.errors import LabelError

# Bazel allows a generous character set in names; these are the ones that would
# make a label ambiguous or unprintable.
_BAD_NAME_CHARS = re.compile(r"[:\\\"\x00-\x1f\x7f]")
_BAD_PACKAGE_CHARS = re.compile(r"[:\\\"@\x00-\x1f\x7f]")


def _check_path(text: str, what: str, original: str, *, allow_empty: bool) -> None:
    if not text:
        if allow_empty:
            return
        raise LabelError(f"invalid label '{original}': empty {what}")
    bad = (_BAD_PACKAGE_CHARS if what == "package name" else _BAD_NAME_CHARS).search(text)
    if bad:
        raise LabelError(
            f"invalid label '{original}': {what} contains the character {bad.group()!r}"
        )
    if text.startswith("/") or text.endswith("/"):
        raise LabelError(f"invalid label '{original}': {what} may not start or end with '/'")
    for segment in text.split("/"):
        if segment == "":
            raise LabelError(f"invalid label '{original}': {what} contains '//'")
        if segment in (".", ".."):
            raise LabelError(
                f"invalid label '{original}': {what} may not contain '{segment}' as a path segment"
            )


def check_package_name(package: str, original: str | None = None) -> None:
    """Raise LabelError unless `package` is a valid package path ('' is the root package)."""
    _check_path(package, "package name", original or f"//{package}", allow_empty=True)


@dataclass(frozen=True, slots=True, order=True)
class Label:
    """A canonical, absolute label: //package:name."""

    package: str
    name: str

    def __str__(self) -> str:
        return f"//{self.package}:{self.name}"

    @staticmethod
    def parse(text: str, current_package: str = "") -> Label:
        """Parse a label as written in a BUILD file (or on the command line).

        `current_package` resolves `:name` and `name`; it is ignored for `//...`.
        """
        original = text
        if not text:
            raise LabelError("invalid label '': empty label")
        if text.startswith("@"):
            raise LabelError(
                f"invalid label '{original}': external repositories (@repo//...) are not supported"
            )
        if text.startswith("//"):
            body = text[2:]
            package, sep, name = body.partition(":")
            check_package_name(package, original)
            if not sep:
                if not package:
                    raise LabelError(
                        f"invalid label '{original}': the root package needs an explicit "
                        "target name, as in '//:name'"
                    )
                name = package.rsplit("/", 1)[-1]
            _check_path(name, "target name", original, allow_empty=False)
            return Label(package, name)
        if text.startswith("/"):
            raise LabelError(
                f"invalid label '{original}': absolute labels start with '//', not '/'"
            )
        name = text[1:] if text.startswith(":") else text
        if ":" in name:
            raise LabelError(
                f"invalid label '{original}': a relative label with a package must be "
                "written '//pkg:name'"
            )
        _check_path(name, "target name", original, allow_empty=False)
        return Label(current_package, name)

    def relative_to(self, package: str) -> str:
        """The shortest form of this label as written in `package`'s BUILD file."""
        return f":{self.name}" if package == self.package else str(self)


class PatternKind(Enum):
    SINGLE = "single"  # //pkg:name
    PACKAGE_RULES = "package_rules"  # //pkg:all
    PACKAGE_TARGETS = "package_targets"  # //pkg:* and //pkg:all-targets
    RECURSIVE_RULES = "recursive_rules"  # //pkg/... and //pkg/...:all
    RECURSIVE_TARGETS = "recursive_targets"  # //pkg/...:* and //pkg/...:all-targets
    # `a/b` relative to the working directory with no colon: Bazel reads it as
    # //cwd/a/b:b if that is a package, else //cwd/a:b, else //cwd:a/b.
    RELATIVE_AMBIGUOUS = "relative_ambiguous"


_ALL_RULES = {"all"}
_ALL_TARGETS = {"*", "all-targets"}


@dataclass(frozen=True, slots=True)
class TargetPattern:
    """One command-line target pattern, already made absolute."""

    kind: PatternKind
    package: str  # the package, or the prefix for recursive patterns ('' = workspace root)
    name: str = ""  # for SINGLE; the relative path for RELATIVE_AMBIGUOUS
    negative: bool = False
    text: str = ""  # as the user wrote it, for messages

    @property
    def label(self) -> Label:
        assert self.kind is PatternKind.SINGLE
        return Label(self.package, self.name)

    @staticmethod
    def parse(text: str, working_package: str = "") -> TargetPattern:
        original = text
        negative = text.startswith("-")
        if negative:
            text = text[1:]
        if not text:
            raise LabelError(f"invalid target pattern '{original}': empty pattern")
        if text.startswith("@"):
            raise LabelError(
                f"invalid target pattern '{original}': external repositories are not supported"
            )
        if text.startswith("//"):
            body = text[2:]
        elif text.startswith("/"):
            raise LabelError(
                f"invalid target pattern '{original}': absolute patterns start with '//'"
            )
        elif text.startswith(":"):
            body = f"{working_package}{text}"
        else:
            body = f"{working_package}/{text}" if working_package else text
            if ":" not in text and not text.endswith("...") and "..." not in text.split("/"):
                path = body
                check_package_name(path.rstrip("/"), original)
                return TargetPattern(
                    PatternKind.RELATIVE_AMBIGUOUS,
                    working_package,
                    text.rstrip("/"),
                    negative,
                    original,
                )

        path, sep, name = body.partition(":")
        if path == "..." or path.endswith("/..."):
            prefix = path[:-3].rstrip("/")
            check_package_name(prefix, original)
            if not sep or name in _ALL_RULES:
                kind = PatternKind.RECURSIVE_RULES
            elif name in _ALL_TARGETS:
                kind = PatternKind.RECURSIVE_TARGETS
            else:
                raise LabelError(
                    f"invalid target pattern '{original}': after '...' only ':all', ':*' or "
                    "':all-targets' may follow"
                )
            return TargetPattern(kind, prefix, "", negative, original)
        if sep and name in _ALL_RULES:
            check_package_name(path, original)
            return TargetPattern(PatternKind.PACKAGE_RULES, path, "", negative, original)
        if sep and name in _ALL_TARGETS:
            check_package_name(path, original)
            return TargetPattern(PatternKind.PACKAGE_TARGETS, path, "", negative, original)
        label = Label.parse("//" + body)
        return TargetPattern(PatternKind.SINGLE, label.package, label.name, negative, original)
