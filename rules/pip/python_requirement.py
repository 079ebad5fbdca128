"""python_requirement: one locked distribution, `@pip//timm`; made by loading, never written.

kiln.loading.pip_repository makes one per distribution of a python_requirements
lock, holding the distribution's locked closure. Its provider is what the
targets that list it in `deps` collect (python_requirements.declared_packages).
"""

from __future__ import annotations

from kiln.rule_api import DefaultInfo, LabelAttr, PythonPackage, Rule, RuleAttrs, RuleContext
from kiln.rules.pip.python_requirements import PythonPackagesInfo, PythonRequirementsInfo
from pydantic import BaseModel, ConfigDict, Field

# Distributions only the toolchain provides: a lock may name them (pip-compile
# writes torch into the locks of timm and transformers) only at the toolchain's
# version; they are never installed from it.
TOOLCHAIN_ONLY = ("torch", "torch_tensorrt", "torch_tensorrt_rtx")


class LockedDistribution(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: str
    version: str
    hashes: list[str]


class PythonRequirementAttrs(RuleAttrs):
    hub: LabelAttr = Field(description="the python_requirements target")
    lock: str = Field(description="the lock file, workspace-relative")
    line: int = Field(description="the line of the lock that pins it")
    closure: list[LockedDistribution] = Field(description="it and what it needs, locked")


def implementation(ctx: RuleContext[PythonRequirementAttrs]) -> list[object]:
    attrs = ctx.attrs
    hub = ctx.provider("hub", attrs.hub, PythonRequirementsInfo, "a python_requirements target")
    for locked in attrs.closure:
        have = ctx.host.version(locked.name) if locked.name in TOOLCHAIN_ONLY else None
        if have is not None and not _same_release(locked.version, have):
            raise ctx.error(
                f"{attrs.lock} pins {locked.name}=={locked.version}, but the toolchain's "
                f"{locked.name} is {have}: kiln never installs {locked.name} from a lock",
                hint=f"lock {locked.name}=={have.split('+')[0]} (or leave it out of the lock)",
            )
    packages = tuple(
        sorted(PythonPackage(p.name, p.version, tuple(p.hashes)) for p in attrs.closure)
    )
    return [DefaultInfo(()), PythonPackagesInfo(hub.label, packages, hub.torchvision_cpu_ops)]


def _same_release(locked: str, installed: str) -> bool:
    """`==2.13.0` admits 2.13.0+cpu (PEP 440: a local label is ignored when the pin has none)."""
    return locked == installed or (
        "+" not in locked and installed.split("+", maxsplit=1)[0] == locked
    )


RULE = Rule(
    name="python_requirement",
    attrs=PythonRequirementAttrs,
    doc="One locked third-party distribution and its closure (made from the lock by loading).",
    impl=implementation,
)
