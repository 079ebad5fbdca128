"""x86-64 instruction sets a CPU package is compiled for: names, requirements, detection.

A package's code needs the instructions it was compiled with, so kiln names them
once, here, and every part reads this table:

    aoti_package   resolves cpu_target ("native" included) to an Isa at analysis;
                   its name goes into the compile's spec (so into the action key)
    AotiCompile    compiles with exactly that Isa: -march=<level> and inductor's
                   vector ISA for it (kiln.actions.isa_compile), never -march=native
    AotiJoin       writes its name and the /proc/cpuinfo flags it needs into the
                   package's metadata (kiln.cpu_isa, kiln.cpu_isa_flags)
    loaders        refuse a package whose flags this CPU lacks, before the first call
    remote exec    a `native` action's platform holds `cpu_isa`, matched against a
                   node's (platform_match)

The levels are the x86-64 psABI's microarchitecture levels; above x86-64-v4 come
the extensions inductor adds on its own when the CPU has them (its VecAVX512VNNI
and VecAMX). What inductor would pick on this machine is `host_isa()`: read from
/proc/cpuinfo (no torch: the CLI calls it on every build), honouring
ATEN_CPU_CAPABILITY as torch._inductor.cpu_vec_isa.pick_vec_isa does (a test
with torch pins the agreement).

A leaf module: imported by the CLI, the rules and the actions alike.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import cache
from typing import Final

CPUINFO = "/proc/cpuinfo"
CAPABILITY_ENV = "ATEN_CPU_CAPABILITY"  # torch's override of its CPU detection


@dataclass(frozen=True)
class Isa:
    """One instruction set a package may be compiled for."""

    name: str  # kiln's name: a cpu_target level, or "x86-64-v4+..." past the levels
    march: str  # the -march inductor compiles with (TORCHINDUCTOR_CPP_MARCH)
    vec_isa: str  # str() of the inductor VecISA it picks ("" for none); AOTI_CPU_ISA upper-cased
    capability: str  # ATEN_CPU_CAPABILITY selecting that VecISA
    flags: tuple[str, ...]  # /proc/cpuinfo flags a CPU needs to run the code
    # Register or mnemonic fragments that code compiled for it never holds (objdump's
    # AT&T syntax): what the build checks the compiled objects for.
    forbidden: tuple[str, ...]


_V2 = ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3")
_V3 = (*_V2, "abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave")
_V4 = (*_V3, "avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")
_VNNI = (*_V4, "avx512_vnni")
_AMX = (*_VNNI, "amx_bf16", "amx_int8", "amx_tile")
# AVX-512 registers and masks; AVX2's; AMX's tiles and tile instructions; VNNI's dot products.
_NO_AVX512 = ("%zmm", "%k1", "%k2", "%k3", "%k4", "%k5", "%k6", "%k7", "{1to")
_NO_AVX = ("%ymm", *_NO_AVX512)
_NO_AMX = ("%tmm", "ldtilecfg", "tileloadd", "tdpb", "tdpfp16")
_NO_VNNI = ("vpdpbusd", "vpdpwssd", *_NO_AMX)

# Lowest first. avx512_bf16 and amx_fp16 are left out on purpose: the compile turns
# inductor's use of them off (kiln.actions.isa_compile), so no level needs them.
ISAS: tuple[Isa, ...] = (
    Isa("x86-64", "x86-64", "", "default", (), (*_NO_AVX, *_NO_VNNI)),
    Isa("x86-64-v2", "x86-64-v2", "", "default", _V2, (*_NO_AVX, *_NO_VNNI)),
    Isa("x86-64-v3", "x86-64-v3", "avx2", "avx2", _V3, (*_NO_AVX512, *_NO_VNNI)),
    Isa("x86-64-v4", "x86-64-v4", "avx512", "avx512", _V4, _NO_VNNI),
    Isa("x86-64-v4+vnni", "x86-64-v4", "avx512 avx512_vnni", "avx512", _VNNI, _NO_AMX),
    Isa("x86-64-v4+vnni+amx", "x86-64-v4", "avx512 avx512_vnni amx_tile", "avx512", _AMX, ()),
)
BY_NAME = {isa.name: isa for isa in ISAS}
DEFAULT_TARGET: Final = "x86-64-v3"


def isa_of(name: str) -> Isa:
    """The Isa named `name` (a cpu_target other than "native", or a resolved name)."""
    return BY_NAME[name]


def resolve(cpu_target: str, host_isa_name: str) -> Isa | None:
    """The Isa a cpu_target compiles for: `native` is the host's (None off x86-64)."""
    if cpu_target == "native":
        return BY_NAME.get(host_isa_name)
    return BY_NAME[cpu_target]


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The flags of the first processor in a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def pick(flags: frozenset[str], capability: str | None) -> Isa:
    """The Isa inductor's pick_vec_isa gives on a CPU with `flags`, under ATEN_CPU_CAPABILITY.

    As torch 2.13 does: of the vector ISAs the CPU has (AMX, AVX-512 VNNI, AVX-512,
    AVX2, best first), "avx2"/"avx512" take the first whose name contains it (so
    "avx512" gives AMX where the CPU has it), "default" none, and anything else the
    best. The level under a vector ISA is the highest whose flags the CPU has.
    """
    vectors = [isa for isa in reversed(ISAS) if isa.vec_isa and flags.issuperset(isa.flags)]
    if capability == "default":
        chosen: Isa | None = None
    elif capability in ("avx2", "avx512"):
        chosen = next((isa for isa in vectors if capability in isa.vec_isa), None)
        chosen = chosen if chosen is not None else (vectors[0] if vectors else None)
    else:
        chosen = vectors[0] if vectors else None
    if chosen is not None:
        return chosen
    plain = [isa for isa in ISAS if not isa.vec_isa and flags.issuperset(isa.flags)]
    return plain[-1]


def lacking(isa_flags: tuple[str, ...] | list[str], flags: frozenset[str]) -> list[str]:
    """The flags of `isa_flags` a CPU with `flags` lacks, in order."""
    return [flag for flag in isa_flags if flag not in flags]


@cache
def host_isa() -> str:
    """The name of the Isa inductor would compile for here ("" off Linux x86-64)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return ""
    flags = this_cpu_flags()
    if flags is None:
        return ""
    return pick(flags, os.environ.get(CAPABILITY_ENV)).name


def needed_by(metadata: dict[str, str]) -> tuple[str, list[str]]:
    """(the instruction set, the /proc/cpuinfo flags) a package's metadata says it needs:
    kiln's kiln.cpu_isa and kiln.cpu_isa_flags, else torch's AOTI_CPU_ISA, whose words
    lower-cased are cpuinfo flags (but AVX512, which is avx512f). The loaders' templates
    hold the same reading."""
    flags = metadata.get("kiln.cpu_isa_flags", "").split()
    aoti = metadata.get("AOTI_CPU_ISA", "")
    if not flags:
        words = aoti.lower().split()
        flags = ["avx512f" if w == "avx512" else w for w in words if w != "invalid_vec_isa"]
    return metadata.get("kiln.cpu_isa") or aoti, flags


def this_cpu_flags() -> frozenset[str] | None:
    """This CPU's flags; None where /proc/cpuinfo cannot be read (nothing to check)."""
    try:
        with open(CPUINFO, encoding="utf-8") as text:
            return cpu_flags(text.read())
    except OSError:
        return None
