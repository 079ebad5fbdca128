"""What a rule may know about the machine its actions run on: facts and toolchains.

Rules never probe the host themselves. Cheap facts (OS, Python, installed
distributions) are gathered once per build into a frozen HostFacts, read as
`ctx.host`. Expensive or optional ones are *toolchains*: a rule declares the
ones it reads (`Rule(toolchains = (GPUS,))`, as Bazel's `toolchains = [...]`)
and reads them as `ctx.toolchain(GPUS)`; each is resolved at most once per
build, when first read, and the analysis cache is keyed on the HostFacts and
on the value of every toolchain that was read.

A toolchain marked `gpu` describes the machine GPU actions run on. When they
run on a cluster (--remote_executor on a host without GPUs), the resolver is
given a RemotePlatform and resolves those toolchains there, on a GPU node,
as that node would resolve them locally; GPU_HOST is that machine's
HostFacts, which GPU actions' platform properties are made from. So a
GPU-less driver computes the very key a GPU machine computes for itself, and
a result built on either is a cache hit for the other.

A leaf module that kiln.rule_api re-exports: the analysis cache unpickles these
on a no-op build, which must not import pydantic.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from kiln import cpu_isa, machine
from kiln.machine import Gpu

T = TypeVar("T")


@dataclass(frozen=True)
class HostFacts:
    """The machine the actions will run on, as far as analysis may know it."""

    os: str  # "linux"
    arch: str  # "x86_64"
    python: str  # "3.11.7"
    python_impl: str  # "cpython"
    # The interpreter that runs Python actions: probes run it. Where it is
    # installed says nothing about what it computes, so it is kept out of keys.
    interpreter: str = field(compare=False)
    distributions: tuple[tuple[str, str], ...]  # (normalized name, version), sorted
    # The instruction set inductor compiles for here (kiln.cpu_isa: "x86-64-v4+vnni+amx";
    # "" off x86-64): what cpu_target = "native" resolves to.
    cpu_isa: str = ""

    @staticmethod
    def of_this_machine() -> HostFacts:
        return HostFacts(
            os=platform.system().lower(),
            arch=platform.machine(),
            python=platform.python_version(),
            python_impl=sys.implementation.name,
            interpreter=sys.executable,
            distributions=machine.distributions(),
            cpu_isa=cpu_isa.host_isa(),
        )

    def version(self, distribution: str) -> str | None:
        """The installed version of `distribution` (as pip spells it), or None."""
        return dict(self.distributions).get(machine.normalized(distribution))

    def digest(self) -> str:
        facts = (self.os, self.arch, self.python, self.python_impl, self.distributions)
        text = repr((*facts, self.cpu_isa))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Toolchain(Generic[T]):
    """A fact about the host that some rules need and finding out costs: resolved lazily.

    `resolve` must return a frozen, picklable value that compares equal when
    nothing relevant changed (the analysis cache compares it with the value it
    was made with).
    """

    name: str
    doc: str
    resolve: Callable[[HostFacts], T] = field(compare=False)
    # What a host able to build every target would give: kiln.bazel.generate analyzes
    # the rules with it, to find their whole action graph without probing anything.
    example: Callable[[], T] | None = field(default=None, compare=False)
    gpu: bool = False  # a fact of the machine GPU actions run on (see RemotePlatform)


class RemotePlatform(Protocol):
    """The machine GPU actions run on when it is not this one (a cluster's GPU node)."""

    def resolve(self, toolchain: Toolchain[T]) -> T:
        """`toolchain.resolve(<that machine's HostFacts>)`, run on that machine."""
        ...


class ToolchainResolver:
    """Resolves toolchains for one build, each at most once, and remembers what was read.

    With a `gpu_platform`, toolchains marked `gpu` are resolved there.
    """

    def __init__(self, host: HostFacts, gpu_platform: RemotePlatform | None = None):
        self.host = host
        self.gpu_platform = gpu_platform
        self.read: dict[str, tuple[Toolchain[Any], Any]] = {}

    def get(self, toolchain: Toolchain[T]) -> T:
        known = self.read.get(toolchain.name)
        if known is None:
            known = self.read[toolchain.name] = (toolchain, self.resolve(toolchain))
        value: T = known[1]
        return value

    def resolve(self, toolchain: Toolchain[T]) -> T:
        """The toolchain's value now, unremembered (the analysis cache checks with it)."""
        if toolchain.gpu and self.gpu_platform is not None:
            return self.gpu_platform.resolve(toolchain)
        return toolchain.resolve(self.host)

    @property
    def gpu_host(self) -> HostFacts:
        """The host facts of the machine GPU actions run on."""
        return self.get(GPU_HOST)


def _gpus(host: HostFacts) -> tuple[Gpu, ...]:
    del host
    return machine.nvidia_gpus()


def _example_gpus() -> tuple[Gpu, ...]:
    # A named function, not a lambda: the analysis cache pickles toolchains.
    return (Gpu("NVIDIA H200", "9.0", 143771),)


GPUS: Toolchain[tuple[Gpu, ...]] = Toolchain(
    "gpus",
    "the CUDA GPUs visible here (nvidia-smi, respecting CUDA_VISIBLE_DEVICES)",
    _gpus,
    example=_example_gpus,
    gpu=True,
)


def _host(host: HostFacts) -> HostFacts:
    return host


GPU_HOST: Toolchain[HostFacts] = Toolchain(
    "gpu_host",
    "the host facts (OS, Python, distributions) of the machine GPU actions run on",
    _host,
    gpu=True,
)

__all__ = [
    "GPUS",
    "GPU_HOST",
    "Gpu",
    "HostFacts",
    "RemotePlatform",
    "Toolchain",
    "ToolchainResolver",
]
