"""aoti_package's cpu_target on real builds: the default is AVX2 code whatever this CPU
has, `native` is what inductor picks here and says so, and the build's disassembly
check catches real AVX-512 code where a package declares x86-64-v3."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kiln import cpu_isa
from kiln.actions.isa_compile import violation

from tests.e2e.test_aoti_package import MLP_BUILD, make_workspace
from tests.kiln_workspace import ModelWorkspace

pytestmark = pytest.mark.torch

BUILD = (
    MLP_BUILD
    + """
aoti_package(name = "mlp_native", model = ":mlp", cpu_target = "native")
"""
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelWorkspace]:
    base = tmp_path_factory.mktemp("cpu_target")
    workspace = make_workspace(base / "ws", base / "cache", BUILD)
    run = workspace.build("//models:mlp_pt2", "//models:mlp_native")
    assert run.code == 0, run.err
    yield workspace


def _metadata(package: Path) -> dict[str, str]:
    with zipfile.ZipFile(package) as archive:
        (record,) = [r for r in archive.namelist() if r.endswith(".wrapper_metadata.json")]
        loaded: dict[str, str] = json.loads(archive.read(record))
    return loaded


def test_the_default_is_avx2_code_on_any_build_machine(built: ModelWorkspace) -> None:
    out = built.root / "kiln-out/models"
    metadata = _metadata(out / "mlp_pt2.pt2")
    assert (metadata["kiln.cpu_isa"], metadata["AOTI_CPU_ISA"]) == ("x86-64-v3", "AVX2")
    assert violation(out / "mlp_pt2.program.pt2", "x86-64-v3") is None


def test_native_is_what_inductor_picked_here_and_says_so(built: ModelWorkspace) -> None:
    metadata = _metadata(built.root / "kiln-out/models/mlp_native.pt2")
    isa = cpu_isa.isa_of(cpu_isa.host_isa())
    assert metadata["kiln.cpu_target"] == "native"
    assert metadata["kiln.cpu_isa"] == isa.name
    assert metadata["kiln.cpu_isa_flags"].split() == list(isa.flags)
    assert metadata["AOTI_CPU_ISA"] == isa.vec_isa.upper()  # torch's record agrees


def test_real_avx512_code_is_beyond_x86_64_v3(built: ModelWorkspace) -> None:
    """inductor's own AVX-512 code, checked against the level below it: the check a
    package declaring x86-64-v3 passes at build, caught."""
    if "avx512" not in cpu_isa.isa_of(cpu_isa.host_isa()).vec_isa:
        pytest.skip("this CPU has no AVX-512: native is AVX2 code")
    found = violation(built.root / "kiln-out/models/mlp_native.program.pt2", "x86-64-v3")
    assert found is not None and ("%zmm" in found.instruction or "%k" in found.instruction)
