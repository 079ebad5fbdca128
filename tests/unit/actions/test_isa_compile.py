"""The build's check that a CPU package's code keeps to its declared instruction set.

Real parts: gcc compiles planted AVX-512 code into a shared object, which goes into a
package archive where AOTInductor puts its .so; binutils' objdump disassembles it.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from kiln.action_specs import CompileSpec
from kiln.actions.aoti_compile import inductor_configs
from kiln.actions.errors import ActionError
from kiln.actions.isa_compile import check_package, compile_env, violation

# AVX-512 where the compiler may use it (-mavx512f), else AVX2.
PLANTED = """
#include <immintrin.h>
void add(float* a, const float* b) {
#ifdef __AVX512F__
  _mm512_storeu_ps(a, _mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b)));
#else
  _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
#endif
}
"""
RECORD = "model/data/aotinductor/model/planted.so"


def _package(tmp_path: Path, *flags: str) -> Path:
    if shutil.which("gcc") is None or shutil.which("objdump") is None:
        pytest.skip("needs gcc and binutils' objdump")
    source = tmp_path / "planted.c"
    source.write_text(PLANTED, encoding="utf-8")
    library = tmp_path / "planted.so"
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", *flags, str(source), "-o", str(library)], check=True
    )
    package = tmp_path / "planted.pt2"
    with zipfile.ZipFile(package, "w") as archive:
        archive.write(library, RECORD)
    return package


def test_zmm_code_in_an_x86_64_v3_package_fails_the_build(tmp_path: Path) -> None:
    package = _package(tmp_path, "-mavx512f")
    with pytest.raises(ActionError) as failed:
        check_package(package, "x86-64-v3")
    assert failed.value.message == (
        f"the package's code uses instructions beyond x86-64-v3: 'vmovups (%rsi),%zmm1' in {RECORD}"
    )
    assert violation(package, "x86-64-v4") is None  # AVX-512 is what v4 declares


def test_the_same_code_compiled_for_avx2_passes(tmp_path: Path) -> None:
    package = _package(tmp_path, "-march=x86-64-v3")
    assert violation(package, "x86-64-v3") is None
    found = violation(package, "x86-64-v2")  # but ymm is beyond x86-64-v2
    assert found is not None and "%ymm" in found.instruction


def test_the_compile_selects_the_level_and_vector_isa() -> None:
    assert compile_env("x86-64-v3") == {
        "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3",
        "ATEN_CPU_CAPABILITY": "avx2",
    }
    assert compile_env("x86-64-v4+vnni+amx") == {
        "TORCHINDUCTOR_CPP_MARCH": "x86-64-v4",
        "ATEN_CPU_CAPABILITY": "avx512",
    }
    assert compile_env(None) == {}


@pytest.mark.torch
def test_the_level_is_an_inductor_config_not_only_the_environment() -> None:
    """torch reads TORCHINDUCTOR_CPP_MARCH once, on importing its config: a persistent
    worker that had imported torch compiled an x86-64-v3 package with -march=native."""
    spec = CompileSpec(
        structure="s.pt2",
        output="p.pt2",
        layout="l.json",
        device="cpu",
        cpu_target="x86-64-v3",
        cpu_isa="x86-64-v3",
        inductor_configs={"cpp.march": "native"},
    )
    assert inductor_configs(spec, "k")["cpp.march"] == "x86-64-v3"  # the declared level wins
