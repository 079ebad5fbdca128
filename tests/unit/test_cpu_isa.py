"""kiln.cpu_isa: the instruction sets of CPU packages, and what inductor picks on a host.

The table's detection must give what torch._inductor.cpu_vec_isa.pick_vec_isa gives,
without importing torch (the CLI reads it on every build): the torch test at the end
holds the two together on this machine, under each ATEN_CPU_CAPABILITY torch honours.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kiln import cpu_isa
from kiln.exec.platform_match import MachineOffer
from kiln.host_facts import HostFacts

V3 = frozenset(cpu_isa.isa_of("x86-64-v3").flags)
SAPPHIRE_RAPIDS = frozenset(cpu_isa.isa_of("x86-64-v4+vnni+amx").flags) | {"avx512_fp16"}


def test_cpuinfo_flags_are_read_from_the_first_processor() -> None:
    text = "processor\t: 0\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    assert cpu_isa.cpu_flags(text) == {"fpu", "avx2", "fma"}


@pytest.mark.parametrize(
    ("flags", "capability", "picked"),
    [
        (SAPPHIRE_RAPIDS, None, "x86-64-v4+vnni+amx"),
        # torch: "avx512" takes the first vector ISA naming it, AMX where there is one
        (SAPPHIRE_RAPIDS, "avx512", "x86-64-v4+vnni+amx"),
        (SAPPHIRE_RAPIDS, "avx2", "x86-64-v3"),
        (SAPPHIRE_RAPIDS, "default", "x86-64-v2"),
        (SAPPHIRE_RAPIDS, "sse", "x86-64-v4+vnni+amx"),  # torch ignores what it does not know
        (V3, None, "x86-64-v3"),
        (V3, "avx512", "x86-64-v3"),  # none names it: torch falls back to the best
        (frozenset(), None, "x86-64"),
    ],
)
def test_the_pick_follows_torch(flags: frozenset[str], capability: str | None, picked: str) -> None:
    assert cpu_isa.pick(flags, capability).name == picked


def test_native_resolves_to_the_host_and_a_level_to_itself() -> None:
    assert cpu_isa.resolve("native", "x86-64-v4+vnni") == cpu_isa.isa_of("x86-64-v4+vnni")
    assert cpu_isa.resolve("x86-64-v3", "x86-64-v4+vnni") == cpu_isa.isa_of("x86-64-v3")
    assert cpu_isa.resolve("native", "") is None  # off x86-64: inductor's own choice


def test_each_level_needs_what_the_one_below_needs() -> None:
    for lower, higher in zip(cpu_isa.ISAS, cpu_isa.ISAS[1:], strict=False):
        assert set(lower.flags) <= set(higher.flags), higher.name
        assert set(higher.forbidden) <= set(lower.forbidden), higher.name


def test_a_machine_offers_its_instruction_set_or_a_dash() -> None:
    host = HostFacts("linux", "x86_64", "3.11.7", "cpython", "/p", (), cpu_isa="x86-64-v3")
    assert MachineOffer(host).value("cpu_isa") == "x86-64-v3"
    arm = HostFacts("linux", "arm64", "3.11.7", "cpython", "/p", ())
    assert MachineOffer(arm).value("cpu_isa") == "-"


PICKED = """
import json, torch._inductor.cpu_vec_isa as v
print(json.dumps(str(v.pick_vec_isa())))
"""
HOST_ISA = "import json, kiln.cpu_isa as c; print(json.dumps(c.host_isa()))"


@pytest.mark.torch
@pytest.mark.parametrize("capability", [None, "default", "avx2", "avx512"])
def test_host_isa_agrees_with_what_inductor_picks(capability: str | None) -> None:
    """The cheap detection against torch's own, on this machine, under each override."""
    env = {k: v for k, v in os.environ.items() if k != cpu_isa.CAPABILITY_ENV}
    if capability is not None:
        env[cpu_isa.CAPABILITY_ENV] = capability
    torch_pick = json.loads(
        subprocess.run(
            [sys.executable, "-c", PICKED], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    kiln_pick = json.loads(
        subprocess.run(
            [sys.executable, "-c", HOST_ISA],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    expected = torch_pick if torch_pick != "INVALID_VEC_ISA" else ""
    assert cpu_isa.isa_of(kiln_pick).vec_isa == expected


def test_a_package_needs_kilns_flags_or_else_what_torch_recorded() -> None:
    kiln_package = {
        "kiln.cpu_isa": "x86-64-v3",
        "kiln.cpu_isa_flags": "avx avx2",
        "AOTI_CPU_ISA": "AVX2",
    }
    assert cpu_isa.needed_by(kiln_package) == ("x86-64-v3", ["avx", "avx2"])
    torch_only = {"AOTI_CPU_ISA": "AVX512 AVX512_VNNI AMX_TILE"}
    assert cpu_isa.needed_by(torch_only) == (
        "AVX512 AVX512_VNNI AMX_TILE",
        ["avx512f", "avx512_vnni", "amx_tile"],
    )
    assert cpu_isa.needed_by({"AOTI_CPU_ISA": "INVALID_VEC_ISA"})[1] == []
