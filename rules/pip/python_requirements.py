"""python_requirements: a workspace's locked third-party Python packages, as `@<name>//...`.

    # the root BUILD file
    python_requirements(
        name = "pip",                        # the repository: @pip//timm, @pip//transformers
        lock = "requirements_lock.txt",      # name==version --hash=... (kiln.pip_lock)
        torchvision_cpu_ops = True,          # PyPI's torchvision on a CPU torch (see README)
    )

    # any target that imports them
    torch_model(name = "vit", ..., deps = ["@pip//timm"])

Declared once, in the root BUILD file (rules_python declares its lock once per
workspace too, with `pip.parse(hub_name = "pip", ...)`). Loading makes a target
`@pip//<name>` for every locked distribution (kiln.loading.pip_repository);
a target that lists it in `deps` runs its Python actions in an environment of
the toolchain plus exactly that package's locked closure, whose names,
versions and hashes are part of those actions' keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kiln.rule_api import DefaultInfo, LabelAttr, PythonPackage, Rule, RuleAttrs, RuleContext
from pydantic import Field


class PythonRequirementsAttrs(RuleAttrs):
    lock: LabelAttr = Field(
        description="the lock: pip requirements pinned with ==, each with --hash, "
        "annotated with '# via' (pip-compile, uv, `python -m kiln.pyenv.lock`)"
    )
    torchvision_cpu_ops: bool = Field(
        default=False,
        description="define torchvision's operator schemas before it is imported when its "
        "C++ extension cannot load (PyPI's torchvision beside a CPU build of torch)",
    )


@dataclass(frozen=True)
class PythonRequirementsInfo:
    """The lock a repository of packages comes from, and its settings."""

    label: str
    torchvision_cpu_ops: bool


@dataclass(frozen=True)
class PythonPackagesInfo:
    """What a target that depends on `@pip//<name>` gets: the packages it may import."""

    hub: str  # the python_requirements target
    packages: tuple[PythonPackage, ...]  # the locked closure, sorted
    torchvision_cpu_ops: bool


@dataclass(frozen=True)
class DeclaredPackages:
    """The third-party packages of one target: the union of its `@pip//` deps' closures."""

    labels: tuple[str, ...]  # the `@pip//name` deps as written (canonical), in order
    packages: tuple[PythonPackage, ...]
    torchvision_cpu_ops: bool


def declared_packages(ctx: RuleContext[Any], attr: str, labels: Sequence[str]) -> DeclaredPackages:
    """The packages the labels of attribute `attr` declare; the other labels are files."""
    infos = [(label, ctx.dep(label).get(PythonPackagesInfo)) for label in labels]
    found = [(label, info) for label, info in infos if info is not None]
    hubs = sorted({info.hub for _, info in found})
    if len(hubs) > 1:
        raise ctx.error(
            f"attribute '{attr}' names packages of {len(hubs)} locks ({', '.join(hubs)}): "
            "one target's packages come from one lock"
        )
    packages: dict[str, PythonPackage] = {}
    for _, info in found:
        for package in info.packages:
            packages.setdefault(package.name, package)
    return DeclaredPackages(
        labels=tuple(label for label, _ in found),
        packages=tuple(sorted(packages.values())),
        torchvision_cpu_ops=any(info.torchvision_cpu_ops for _, info in found),
    )


def implementation(ctx: RuleContext[PythonRequirementsAttrs]) -> list[object]:
    if ctx.package:
        raise ctx.error(
            "python_requirements() belongs in the root BUILD file: its repository "
            f"'@{ctx.name}' is found there",
            hint=f"move it to the BUILD file at the workspace root (//:{ctx.name})",
        )
    lock = ctx.file("lock", ctx.attrs.lock)
    return [
        DefaultInfo((lock,)),
        PythonRequirementsInfo(ctx.label, ctx.attrs.torchvision_cpu_ops),
    ]


RULE = Rule(
    name="python_requirements",
    attrs=PythonRequirementsAttrs,
    doc=(
        "The workspace's lock of third-party Python packages, declared once in the root BUILD "
        "file; targets name its packages as `@<name>//<distribution>` in their deps."
    ),
    impl=implementation,
    root_package=True,
)
