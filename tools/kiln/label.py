"""Labels and target patterns, written exactly as Bazel writes them.

A Label names one target: `//pkg/path:name`. In BUILD files and on the
command line shorter forms are accepted and resolved against the current
package: `//pkg` (means `//pkg:pkg`), `:name`, and `name`. `@//pkg:name`
names the main repository. Other repositories are the ones kiln makes itself,
for third-party Python packages (`@pip//timm`, see kiln.loading.pip_repository):
external_label() gives their canonical form, `@pip//timm:timm`; Label and
target patterns refuse them.

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
# make a label ambiguous or unprintable (whitespace splits `kiln query` output).
_BAD_NAME_CHARS = re.compile(r"[:\\\"\s\x00-\x1f\x7f]")
_BAD_PACKAGE_CHARS = re.compile(r"[:\\\"@\s\x00-\x1f\x7f]")
# `@//pkg:name` and `@@//pkg:name` name the main repository, the only one kiln has.
_MAIN_REPOSITORY = ("@@//", "@//")


class _Invalid(Exception):
    """Why a label or pattern is malformed; the caller says which text it was."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _check_path(text: str, what: str, *, allow_empty: bool) -> None:
    if not text:
        if allow_empty:
            return
        raise _Invalid(f"empty {what}")
    package = what == "package name"
    bad = (_BAD_PACKAGE_CHARS if package else _BAD_NAME_CHARS).search(text)
    if bad:
        raise _Invalid(f"{what} contains the character {bad.group()!r}")
    if text.startswith("/") or text.endswith("/"):
        raise _Invalid(f"{what} may not start or end with '/'")
    for segment in text.split("/"):
        if segment == "":
            raise _Invalid(f"{what} contains '//'")
        # Bazel: "package name component contains only '.' characters".
        if segment in (".", "..") or (package and segment.strip(".") == ""):
            raise _Invalid(f"{what} may not contain '{segment}' as a path segment")


def _quote(text: str) -> str:
    """`text` quoted for a one-line message: control characters escaped."""
    return f"'{text}'" if text.isprintable() else repr(text)


def _strip_main_repository(text: str) -> str:
    for prefix in _MAIN_REPOSITORY:
        if text.startswith(prefix):
            return text[len(prefix) - 2 :]
    if text.startswith("@"):
        raise _Invalid("external repositories (@repo//...) are not supported")
    return text


_REPOSITORY = re.compile(r"@(?P<repo>[A-Za-z][A-Za-z0-9_.-]*)//(?P<rest>.*)\Z", re.DOTALL)


def external_label(text: str) -> str | None:
    """`@repo//pkg[:name]` as `@repo//pkg:name`, the form such labels are stored in;
    None when `text` names no other repository. A LabelError if it is malformed."""
    found = _REPOSITORY.match(text)
    if found is None:
        if text.startswith("@") and not text.startswith(_MAIN_REPOSITORY):
            raise LabelError(f"invalid label {_quote(text)}: repository names look like '@name//'")
        return None
    rest = found.group("rest")
    try:
        label = None if rest.startswith(":") or not rest else Label._parse("//" + rest, "")
    except _Invalid as error:
        raise LabelError(f"invalid label {_quote(text)}: {error.reason}") from None
    if label is None or not label.package:
        raise LabelError(
            f"invalid label {_quote(text)}: name a package of the repository, as in "
            f"'@{found.group('repo')}//name'"
        )
    return f"@{found.group('repo')}{label}"


def target_name_problem(name: str) -> str | None:
    """Why `name` cannot name a target (as in `name = "..."`), or None if it can."""
    try:
        _check_path(name, "target name", allow_empty=False)
    except _Invalid as error:
        return error.reason
    return None


def package_name_problem(package: str) -> str | None:
    """Why `package` cannot name a package ('' is the root package), or None if it can."""
    try:
        _check_path(package, "package name", allow_empty=True)
    except _Invalid as error:
        return error.reason
    return None


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
        try:
            return Label._parse(text, current_package)
        except _Invalid as error:
            raise LabelError(f"invalid label {_quote(text)}: {error.reason}") from None

    @staticmethod
    def _parse(text: str, current_package: str) -> Label:
        if not text:
            raise _Invalid("empty label")
        text = _strip_main_repository(text)
        if text.startswith("//"):
            package, sep, name = text[2:].partition(":")
            _check_path(package, "package name", allow_empty=True)
            if not sep:
                if not package:
                    raise _Invalid(
                        "the root package needs an explicit target name, as in '//:name'"
                    )
                name = package.rsplit("/", 1)[-1]
            _check_path(name, "target name", allow_empty=False)
            return Label(package, name)
        if text.startswith("/"):
            raise _Invalid("absolute labels start with '//', not '/'")
        name = text[1:] if text.startswith(":") else text
        if ":" in name:
            raise _Invalid("a relative label with a package must be written '//pkg:name'")
        _check_path(name, "target name", allow_empty=False)
        return Label(current_package, name)

    def relative_to(self, package: str) -> str:
        """The shortest form of this label as written in `package`'s BUILD file."""
        return f":{self.name}" if package == self.package else str(self)


# A path segment that is certainly valid in a package and in a name: ordinary
# characters, not only dots. Labels made of these (nearly all of them) are
# canonicalised by canonical() with one match instead of a full parse.
_PLAIN_SEGMENT = r"\.*[\w+=,~#%-][\w.+=,~#%-]*"
_PLAIN_PATH = rf"{_PLAIN_SEGMENT}(?:/{_PLAIN_SEGMENT})*"
_PLAIN_LABEL = re.compile(rf"(?://(?P<package>(?:{_PLAIN_PATH})?):|:?)(?P<name>{_PLAIN_PATH})\Z")


def canonical(text: str, current_package: str = "") -> str:
    """`str(Label.parse(text, current_package))`, the form labels are stored in.

    Loading calls this for every label a BUILD file writes, so the common forms
    (`//pkg:name`, `:name`, `name` with plain characters) skip building a Label;
    anything else, including every malformed label, goes through Label.parse.
    """
    plain = _PLAIN_LABEL.match(text)
    if plain is None:
        return str(Label.parse(text, current_package))
    package = plain.group("package")
    return f"//{current_package if package is None else package}:{plain.group('name')}"


class PatternKind(Enum):
    SINGLE = "single"  # //pkg:name
    PACKAGE_RULES = "package_rules"  # //pkg:all
    PACKAGE_TARGETS = "package_targets"  # //pkg:* and //pkg:all-targets
    RECURSIVE_RULES = "recursive_rules"  # //pkg/... and //pkg/...:all
    RECURSIVE_TARGETS = "recursive_targets"  # //pkg/...:* and //pkg/...:all-targets
    # `a/b` relative to the working directory with no colon: Bazel reads it as
    # //cwd/a/b:b if that is a package, else //cwd/a:b, else //cwd:a/b.
    RELATIVE_AMBIGUOUS = "relative_ambiguous"
    # `@pip//timm`: one target of another repository (its `name` is the canonical label,
    # `@pip//timm:timm`), as deps() prints them. No wildcards there: its packages are
    # made from a lock, not found by walking folders.
    EXTERNAL = "external"


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
        try:
            return TargetPattern._parse(text, working_package)
        except _Invalid as error:
            raise LabelError(f"invalid target pattern {_quote(text)}: {error.reason}") from None

    @staticmethod
    def _parse(text: str, working_package: str) -> TargetPattern:
        original = text
        negative = text.startswith("-")
        if negative:
            text = text[1:]
        if not text:
            raise _Invalid("empty pattern")
        if text.startswith("-"):
            # Only `--` itself lets such a word through click, which would have read it as a
            # flag: after `--` every word is a pattern (Bazel's rule), and one `-` subtracts.
            raise _Invalid(
                "a pattern starts with one '-' at most (a subtraction, as in -//pkg:x); "
                "every word after '--' is a target pattern: put flags before '--'"
            )
        if text.startswith("@") and not text.startswith(_MAIN_REPOSITORY):
            return TargetPattern._external(text, negative, original)
        text = _strip_main_repository(text)
        if text.startswith("//"):
            body = text[2:]
        elif text.startswith("/"):
            raise _Invalid("absolute patterns start with '//'")
        elif text.startswith(":"):
            body = f"{working_package}{text}"
        else:
            body = f"{working_package}/{text}" if working_package else text
            if ":" not in text and "..." not in text.split("/"):
                _check_path(body.rstrip("/"), "package name", allow_empty=True)
                return TargetPattern(
                    PatternKind.RELATIVE_AMBIGUOUS,
                    working_package,
                    text.rstrip("/"),
                    negative,
                    original,
                )

        path, sep, name = body.partition(":")
        segments = path.split("/")
        if "..." in segments[:-1]:
            raise _Invalid("'...' may only end the package part of a pattern, as in '//pkg/...'")
        if segments[-1] == "...":
            prefix = path[:-3].rstrip("/")
            _check_path(prefix, "package name", allow_empty=True)
            if not sep or name in _ALL_RULES:
                kind = PatternKind.RECURSIVE_RULES
            elif name in _ALL_TARGETS:
                kind = PatternKind.RECURSIVE_TARGETS
            else:
                raise _Invalid("after '...' only ':all', ':*' or ':all-targets' may follow")
            return TargetPattern(kind, prefix, "", negative, original)
        if sep and name in _ALL_RULES:
            _check_path(path, "package name", allow_empty=True)
            return TargetPattern(PatternKind.PACKAGE_RULES, path, "", negative, original)
        if sep and name in _ALL_TARGETS:
            _check_path(path, "package name", allow_empty=True)
            return TargetPattern(PatternKind.PACKAGE_TARGETS, path, "", negative, original)
        label = Label._parse("//" + body, "")
        return TargetPattern(PatternKind.SINGLE, label.package, label.name, negative, original)

    @staticmethod
    def _external(text: str, negative: bool, original: str) -> TargetPattern:
        repository, _, rest = text.partition("//")
        path, _, name = rest.partition(":")
        if "..." in path.split("/") or name in _ALL_RULES | _ALL_TARGETS:
            raise _Invalid(
                f"wildcards over an external repository are not supported: name one of its "
                f"targets, as in '{repository}//name'"
            )
        try:
            label = external_label(text)
        except LabelError as error:
            raise _Invalid(error.message.partition(": ")[2] or error.message) from None
        assert label is not None  # it starts with '@' and is no main-repository label
        package = label[: label.index(":")]
        return TargetPattern(PatternKind.EXTERNAL, package, label, negative, original)
