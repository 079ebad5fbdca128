"""Compiling for a declared instruction set, and checking the compiled code keeps to it.

Inductor, left alone, compiles with -march=native and picks the best vector ISA
this CPU has (AMX where there is one): the package then needs the build
machine's CPU, whatever its key says. AotiCompile instead compiles for the Isa
the rule resolved (kiln.cpu_isa):

    -march=<the Isa's level>         inductor's cpp.march (and TORCHINDUCTOR_CPP_MARCH)
    exactly the Isa's vector ISA     inductor's list of valid vector ISAs is pinned
                                     to that one (no probing of this CPU), with the
                                     optional AVX-512 BF16 and AMX FP16 left off

So the same spec gives the same code on any host, an AVX-512 one included.
`check_package` then disassembles every shared object of the package with
binutils' objdump and fails on a register or instruction the Isa excludes
(zmm in an x86-64-v3 package): a torch version or an inductor_config that
slips past the pin fails the build, never a deployment.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln import cpu_isa
from kiln.actions.errors import ActionError


def compile_env(isa_name: str | None) -> dict[str, str]:
    """The environment that selects `isa_name`'s level and vector ISA (None: inductor's own)."""
    if isa_name is None:
        return {}
    isa = cpu_isa.isa_of(isa_name)
    return {"TORCHINDUCTOR_CPP_MARCH": isa.march, cpu_isa.CAPABILITY_ENV: isa.capability}


def isa_configs(isa_name: str | None) -> dict[str, str]:
    """The inductor_configs that set `isa_name`'s -march. Not TORCHINDUCTOR_CPP_MARCH
    alone: torch reads it once, when its config is imported, so a worker that imported
    torch for an earlier action compiled with -march=native (AVX-512 code in an x86-64-v3
    package on an AVX-512 machine: the check below found it)."""
    if isa_name is None or not _has_march_config():
        return {}
    return {"cpp.march": cpu_isa.isa_of(isa_name).march}


def _has_march_config() -> bool:
    """Whether this torch's inductor has `cpp.march` (2.13 has; 2.11, the GPU machine's,
    has not: setting it failed every compile there). Without it only the environment
    variable selects the level, and the disassembly check below says if that did not."""
    from torch._inductor import config

    return hasattr(config.cpp, "march")


@contextlib.contextmanager
def pinned_vec_isa(isa_name: str | None) -> Iterator[None]:
    """While the block runs, inductor's valid vector ISAs are `isa_name`'s alone."""
    if isa_name is None:
        yield
        return
    from torch._inductor import cpu_vec_isa

    wanted = cpu_isa.isa_of(isa_name).vec_isa
    pinned = [_pinned(type(v))() for v in cpu_vec_isa.supported_vec_isa_list if str(v) == wanted]
    original = cpu_vec_isa.valid_vec_isa_list

    def valid_vec_isa_list() -> list[Any]:
        return list(pinned)

    cpu_vec_isa.valid_vec_isa_list = valid_vec_isa_list  # type: ignore[assignment]
    try:
        yield
    finally:
        cpu_vec_isa.valid_vec_isa_list = original


def _pinned(cls: type[Any]) -> type[Any]:
    """`cls` valid without probing this CPU or compiler (whose answers would add BF16/FP16)."""

    def is_valid(self: Any) -> bool:
        del self
        return True

    return type(cls.__name__, (cls,), {"__bool__": is_valid})


@dataclass(frozen=True)
class Violation:
    isa: str
    library: str  # the shared object's record in the package
    instruction: str  # objdump's line

    def __str__(self) -> str:
        return (
            f"the package's code uses instructions beyond {self.isa}: "
            f"'{self.instruction}' in {self.library}"
        )


def check_package(package: Path, isa_name: str) -> None:
    """Fail if a shared object of `package` holds code `isa_name` excludes."""
    found = violation(package, isa_name)
    if found is not None:
        raise ActionError(
            str(found),
            hint="a torch version or an inductor_config compiled past the declared level; "
            "choose a higher cpu_target, or remove the setting",
        )


def violation(package: Path, isa_name: str) -> Violation | None:
    """The first instruction of `package`'s shared objects that `isa_name` excludes."""
    forbidden = cpu_isa.isa_of(isa_name).forbidden
    if not forbidden:
        return None
    with zipfile.ZipFile(package) as archive, tempfile.TemporaryDirectory() as tmp:
        for record in archive.namelist():
            if not record.endswith(".so"):
                continue
            library = Path(tmp) / "code.so"
            library.write_bytes(archive.read(record))
            line = first_forbidden(library, forbidden)
            if line is not None:
                return Violation(isa_name, record, line)
    return None


def first_forbidden(library: Path, forbidden: tuple[str, ...]) -> str | None:
    """The first disassembled instruction of `library` naming one of `forbidden`."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise ActionError(
            "objdump is not installed: the build checks a CPU package's code against its "
            "cpu_target by disassembling it",
            hint="install binutils (apt-get install binutils; tools/bootstrap.sh does)",
        )
    with subprocess.Popen(
        [objdump, "-d", "--no-show-raw-insn", "--no-addresses", str(library)],
        stdout=subprocess.PIPE,
        text=True,
    ) as disassembly:
        assert disassembly.stdout is not None
        for line in disassembly.stdout:
            if line.startswith("\t") and any(part in line for part in forbidden):
                disassembly.kill()
                return " ".join(line.split())
    return None
