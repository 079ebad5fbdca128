"""Visibility: which packages may depend on a target, as Bazel decides it.

A rule's `visibility` (or its package's `package(default_visibility = ...)`,
else private) lists who may depend on it:

    //visibility:public        every package
    //visibility:private       its own package only (the default)
    //pkg:__pkg__              the package //pkg
    //pkg:__subpackages__      //pkg and every package beneath it

A generated file has the visibility of the rule that makes it. A source
file is private to its package unless `exports_files()` names it (then it
is public, or what exports_files' `visibility` says): Bazel's rule under
--incompatible_no_implicit_file_export. A target of the same package is
always visible. package_group() is not supported.

Like Bazel, kiln checks visibility when it builds, not in `kiln query`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.errors import LoadingError, Location
from kiln.loading.package import GENERATED_FILE, SOURCE_FILE, Package, Target

PUBLIC = "//visibility:public"
PRIVATE = "//visibility:private"
_SPECIAL = (":__pkg__", ":__subpackages__")


def problem(label: str) -> str | None:
    """Why a canonical label cannot be a visibility entry, or None."""
    if label in (PUBLIC, PRIVATE) or label.endswith(_SPECIAL):
        return None
    return (
        f"invalid visibility '{label}': use //visibility:public, //visibility:private, "
        "//pkg:__pkg__ or //pkg:__subpackages__ (package_group() is not supported)"
    )


def allows(visibility: tuple[str, ...] | list[str] | None, package: str) -> bool:
    """Whether a target with `visibility` may be used from `package` (another package)."""
    for entry in visibility or ():
        if entry == PUBLIC:
            return True
        where, _, kind = entry[2:].partition(":")
        if kind == "__pkg__" and where == package:
            return True
        if kind == "__subpackages__" and (
            not where or package == where or package.startswith(where + "/")
        ):
            return True
    return False


@dataclass(frozen=True)
class Refusal:
    """Why `user` may not depend on `used`: the message and the fix."""

    message: str
    hint: str


def check_edge(
    user: Target,
    used: Target,
    targets: dict[str, Target],
    package_of: Callable[[str], Package],
    locate: Callable[[Target], Location],
) -> Refusal | None:
    """None if `user` may depend on `used`, else the refusal."""
    here, there = user.package, used.package
    if here == there:
        return None
    owner = used
    if used.kind == GENERATED_FILE:
        owner = targets[used.deps[0]]
    if used.kind == SOURCE_FILE:
        package = package_of(there)
        exported = package.exported.get(used.name)
        if exported is None:
            return Refusal(
                f"target '{used.label}' is not visible from target '{user.label}': a source "
                f"file of another package is visible only once exported",
                f'add exports_files(["{used.name}"]) to {package.build_file}',
            )
        if allows(exported, here):
            return None
        return Refusal(
            f"target '{used.label}' is not visible from target '{user.label}'",
            f'add "//{here}:__pkg__" to the visibility of exports_files(["{used.name}"]) '
            f"in {package.build_file}",
        )
    if allows(owner.attrs.get("visibility"), here):
        return None
    made_by = f" (an output of '{owner.label}')" if owner is not used else ""
    return Refusal(
        f"target '{used.label}'{made_by} is not visible from target '{user.label}'",
        f'add "//{here}:__pkg__" to the visibility of {owner.label} ({locate(owner)}), or '
        '"//visibility:public"',
    )


def check(
    targets: dict[str, Target],
    package_of: Callable[[str], Package],
    locate: Callable[[Target], Location],
) -> None:
    """Raise a LoadingError at the first dependency its target may not use."""
    for target in targets.values():
        package = target.package
        if package.startswith("@"):
            # A target kiln made of a lock (@pip//timm): its one edge, to the
            # python_requirements that declares it, is the repository's own.
            continue
        for dep in target.deps:
            if dep.startswith(f"//{package}:"):
                continue  # the same package: always visible
            refusal = check_edge(target, targets[dep], targets, package_of, locate)
            if refusal is not None:
                raise LoadingError(
                    refusal.message,
                    location=locate(target),
                    label=target.label,
                    hint=refusal.hint,
                )
