"""Expanding command-line target patterns into labels, as Bazel does."""

from __future__ import annotations

from collections.abc import Callable

from kiln.errors import KilnError, LabelError, LoadingError, Location
from kiln.label import Label, PatternKind, TargetPattern, package_name_problem
from kiln.loading.graph import GraphBuilder
from kiln.loading.loader import PackageLoader


def parse_patterns(texts: list[str], working_package: str) -> list[TargetPattern]:
    return [TargetPattern.parse(text, working_package) for text in texts]


def expand(
    loader: PackageLoader,
    patterns: list[TargetPattern],
    *,
    skip_manual: bool = False,
    on_error: Callable[[KilnError], None] | None = None,
) -> list[str]:
    """The labels the patterns name, in order, positives minus negatives.

    skip_manual (for builds, as Bazel's): wildcards (`...`, `:all`, `:*`) leave
    out targets tagged "manual"; naming one explicitly still selects it.

    A package beneath a later `-//pkg/...` is never loaded, so a broken package
    can be left out of `//...` that way (Bazel does the same).

    on_error (--keep_going): a package that fails to load while a wildcard is
    expanded is reported there and left out; the other packages' targets stay.
    """
    selected: dict[str, None] = {}
    for at, pattern in enumerate(patterns):
        excluded = [
            later.package
            for later in patterns[at + 1 :]
            if later.negative and later.kind in _RECURSIVE and not pattern.negative
        ]
        if pattern.negative and pattern.kind in _RECURSIVE:
            # Everything beneath it goes; its packages need not (and must not) load.
            for label in [
                label for label in selected if _beneath(_package_of(label), pattern.package)
            ]:
                del selected[label]
            continue
        labels = _expand_one(loader, pattern, excluded, on_error)
        if skip_manual and pattern.kind not in _NAMED:
            labels = [label for label in labels if not _is_manual(loader, label)]
        if pattern.negative:
            for label in labels:
                selected.pop(label, None)
        else:
            selected.update(dict.fromkeys(labels))
    return list(selected)


_RECURSIVE = (PatternKind.RECURSIVE_RULES, PatternKind.RECURSIVE_TARGETS)
# Patterns that name their target: it is selected even if tagged "manual".
_NAMED = (PatternKind.SINGLE, PatternKind.RELATIVE_AMBIGUOUS, PatternKind.EXTERNAL)


def _package_of(label: str) -> str:
    return label[2 : label.index(":")]


def _beneath(package: str, prefix: str) -> bool:
    return not prefix or package == prefix or package.startswith(prefix + "/")


def _expand_one(
    loader: PackageLoader,
    pattern: TargetPattern,
    excluded: list[str],
    on_error: Callable[[KilnError], None] | None,
) -> list[str]:
    kind = pattern.kind
    if kind is PatternKind.SINGLE:
        return [GraphBuilder(loader).resolve(str(pattern.label), None).label]
    if kind is PatternKind.EXTERNAL:
        return [GraphBuilder(loader).resolve(pattern.name, None).label]
    if kind is PatternKind.RELATIVE_AMBIGUOUS:
        return [str(_resolve_relative(loader, pattern))]
    if kind in (PatternKind.PACKAGE_RULES, PatternKind.PACKAGE_TARGETS):
        return _package_targets(loader, pattern.package, kind is PatternKind.PACKAGE_TARGETS)
    packages = loader.packages_beneath(pattern.package)
    if not packages:
        where = f"'//{pattern.package}'" if pattern.package else "the workspace"
        raise LoadingError(
            f"no packages found beneath {where} (pattern '{pattern.text}')",
            hint="a package is a directory with a BUILD file",
        )
    packages = [p for p in packages if not any(_beneath(p, prefix) for prefix in excluded)]
    for package in packages:
        _check_folder_name(loader, package)
    loader.prefetch(packages)
    every = kind is PatternKind.RECURSIVE_TARGETS
    labels: list[str] = []
    for package in packages:
        try:
            labels += _package_targets(loader, package, every)
        except KilnError as error:
            if on_error is None:
                raise
            on_error(error)
    return labels


def _is_manual(loader: PackageLoader, label: str) -> bool:
    package, _, name = label[2:].partition(":")
    target = loader.package(package).targets.get(name)
    return target is not None and "manual" in (target.attrs.get("tags") or ())


def _package_targets(loader: PackageLoader, name: str, every: bool) -> list[str]:
    package = loader.package(name)
    labels = [t.label for t in package.targets.values() if every or t.is_rule]
    if every:
        sources = set(package.source_files)
        for target in package.targets.values():
            sources.update(d for d in target.deps if d.startswith(f"//{name}:"))
        labels += sorted(sources - {t.label for t in package.targets.values()})
    return labels


def _resolve_relative(loader: PackageLoader, pattern: TargetPattern) -> Label:
    """`a/b` from the working directory: //cwd/a/b:b, else //cwd/a:b, else //cwd:a/b."""
    base = pattern.package
    parts = pattern.name.split("/")
    for split_at in range(len(parts), -1, -1):
        package = "/".join(filter(None, [base, *parts[:split_at]]))
        if loader.is_package(package):
            name = "/".join(parts[split_at:]) or parts[-1]
            try:
                return Label.parse(f"//{package}:{name}")
            except LabelError as error:
                raise LabelError(
                    f"invalid target pattern '{pattern.text}': {error.message}"
                ) from None
    raise LoadingError(
        f"no package contains '{pattern.text}' (looked from '//{base}' upwards to the pattern)",
        hint="write the label in full, as //package:name",
    )


def _check_folder_name(loader: PackageLoader, package: str) -> None:
    """A folder with a BUILD file whose path cannot be a package name (`a:b`, `my pkg`)
    made `//...` load some other package instead (issue 11)."""
    reason = package_name_problem(package)
    if reason is not None:
        build_file = loader.workspace.build_file(package) or f"{package}/BUILD"
        raise LoadingError(
            f"folder '{package}' holds a BUILD file, but its path is no package name: {reason}",
            location=Location(build_file),
            hint="rename the folder, or list it in .kilnignore to leave it out",
        )
