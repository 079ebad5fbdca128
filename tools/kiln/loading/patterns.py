"""Expanding command-line target patterns into labels, as Bazel does."""

from __future__ import annotations

from kiln.errors import LabelError, LoadingError, Location
from kiln.label import Label, PatternKind, TargetPattern, package_name_problem
from kiln.loading.graph import GraphBuilder
from kiln.loading.loader import PackageLoader


def parse_patterns(texts: list[str], working_package: str) -> list[TargetPattern]:
    return [TargetPattern.parse(text, working_package) for text in texts]


def expand(
    loader: PackageLoader, patterns: list[TargetPattern], *, skip_manual: bool = False
) -> list[str]:
    """The labels the patterns name, in order, positives minus negatives.

    skip_manual (for builds, as Bazel's): wildcards (`...`, `:all`, `:*`) leave
    out targets tagged "manual"; naming one explicitly still selects it.
    """
    selected: dict[str, None] = {}
    for pattern in patterns:
        labels = _expand_one(loader, pattern)
        if skip_manual and pattern.kind not in (PatternKind.SINGLE, PatternKind.RELATIVE_AMBIGUOUS):
            labels = [label for label in labels if not _is_manual(loader, label)]
        if pattern.negative:
            for label in labels:
                selected.pop(label, None)
        else:
            selected.update(dict.fromkeys(labels))
    return list(selected)


def _expand_one(loader: PackageLoader, pattern: TargetPattern) -> list[str]:
    kind = pattern.kind
    if kind is PatternKind.SINGLE:
        return [GraphBuilder(loader).resolve(str(pattern.label), None).label]
    if kind is PatternKind.RELATIVE_AMBIGUOUS:
        return [str(_resolve_relative(loader, pattern))]
    if kind in (PatternKind.PACKAGE_RULES, PatternKind.PACKAGE_TARGETS):
        return _package_targets(loader, pattern.package, kind is PatternKind.PACKAGE_TARGETS)
    packages = loader.packages_beneath(pattern.package)
    for package in packages:
        _check_folder_name(loader, package)
    if not packages:
        where = f"'//{pattern.package}'" if pattern.package else "the workspace"
        raise LoadingError(
            f"no packages found beneath {where} (pattern '{pattern.text}')",
            hint="a package is a directory with a BUILD file",
        )
    loader.prefetch(packages)
    every = kind is PatternKind.RECURSIVE_TARGETS
    return [label for package in packages for label in _package_targets(loader, package, every)]


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
