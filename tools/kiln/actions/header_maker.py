"""kiln's header maker: the one writer of the precompiled-header store (header_store.py).

    python -m kiln.actions.header_maker <requests.jsonl>

Run by kiln (exec/sandboxing.py), never by an action, on a header a running action asks
for (exec/header_requests.py) while the action waits: in kiln's sandbox, with the store
bound writable at $KILN_TORCH_PUBLISH and the action's paths everywhere else
(/tmp/kiln-torch-tmp, the toolchain links), so inductor names and builds the header
here exactly as in the action.

A request is data the action wrote, so it is trusted for nothing: the header must be
one of torch's own (torch/csrc/inductor/...), the settings are inductor's flags
(booleans and a device), the vector ISA one inductor knows by name, the environment
the CPU target's two variables. Nothing names a program, a path or a flag. The maker
makes the header from those alone, with torch and kiln code and the system compiler,
and publishes it under the name inductor gives it here; that name hashes the flags,
the preprocessed header and the compiler, so it is the action's name only when it
was made as the action would have. A header whose name differs is not published.
Publishing renames the compiled header into place first, then its .h, so a reader
that sees the .h sees both (header_store.link_store).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from kiln.actions import header_store, temp_state

PUBLISH_ENV = "KILN_TORCH_PUBLISH"
_HEADER = re.compile(r"torch/csrc/inductor/[a-z_]+(/[a-z_]+)*\.h")
_NAME = re.compile(r"[a-z0-9]{20,80}\.h")
_DEVICES = {"cpu", "cuda", "xpu"}
_ISA_ENVIRONMENT = {
    "TORCHINDUCTOR_CPP_MARCH": re.compile(r"x86-64(-v[234])?|native"),
    "ATEN_CPU_CAPABILITY": re.compile(r"default|avx2|avx512"),
}


def valid(request: Any) -> bool:
    """Whether `request` holds only what the maker may take from an action."""
    if not isinstance(request, dict) or set(request) != {
        "header",
        "name",
        "settings",
        "vec_isa",
        "environment",
        "configs",
    }:
        return False
    header, name, settings = request["header"], request["name"], request["settings"]
    environment, vec_isa = request["environment"], request["vec_isa"]
    if not (isinstance(header, str) and _HEADER.fullmatch(header) and ".." not in header):
        return False
    if not (isinstance(name, str) and _NAME.fullmatch(name)):
        return False
    if not isinstance(settings, dict) or not set(settings) <= set(header_store.REQUEST_SETTINGS):
        return False
    for key, value in settings.items():
        ok = value in _DEVICES if key == "device_type" else isinstance(value, bool)
        if not ok:
            return False
    if not (isinstance(vec_isa, str) and re.fullmatch(r"[a-z0-9_]{0,16}", vec_isa)):
        return False
    if not isinstance(environment, dict) or not _valid_configs(request["configs"]):
        return False
    return all(
        k in _ISA_ENVIRONMENT and isinstance(v, str) and _ISA_ENVIRONMENT[k].fullmatch(v)
        for k, v in environment.items()
    )


def _valid_configs(configs: Any) -> bool:
    if not isinstance(configs, dict):
        return False
    for key, value in configs.items():
        wanted = header_store.REQUEST_CONFIGS.get(key)
        if wanted is None:
            return False
        if value is None:  # torch's default
            continue
        if wanted is bool:
            if not isinstance(value, bool):
                return False
        elif not (isinstance(value, (str, bool)) and re.fullmatch(str(wanted), str(value))):
            return False
    return True


def companion(request: dict[str, Any]) -> dict[str, Any] | None:
    """The header inductor asks for next, if it asks for another: a CPU compile
    precompiles its wrapper's header, then its kernels' (cpp_prefix.h) with the same
    settings but min_optimize (codecache.AotCodeCompiler.compile). Made in the same run,
    it spares the action a second request and the maker a second start (importing torch
    is most of a maker's start). Its name is what it comes out as here: a header whose
    settings differ from the action's is published under a name the action never asks
    for, which costs a make and changes nothing."""
    from torch._inductor import codecache

    settings = request["settings"]
    prefix = codecache._get_cpp_prefix_header(settings.get("device_type", "cpu"))
    if prefix is None or request["header"] == prefix:
        return None
    settings = {k: v for k, v in settings.items() if k != "min_optimize"}
    return {**request, "header": prefix, "name": None, "settings": settings}


def make(request: dict[str, Any], publish: Path) -> bool:
    """Make the header `request` asks for and publish it; False if it came out under
    another name than the action's (made otherwise: not the action's header). A request
    naming no header (a companion's) is published under whatever name it comes out as."""
    from torch._inductor import codecache, cpp_builder, cpu_vec_isa

    from kiln.actions import isa_compile

    if request["environment"]:  # a CPU target: its ISA pinned as AotiCompile pins it
        isas = {str(v): isa_compile._pinned(type(v))() for v in cpu_vec_isa.supported_vec_isa_list}
    else:
        isas = {str(isa): isa for isa in cpu_vec_isa.valid_vec_isa_list()}
    vec_isa = isas.get(request["vec_isa"], cpu_vec_isa.invalid_vec_isa)
    settings = dict(request["settings"])
    # What inductor hashes as the compile command (codecache.AotCodeCompiler.compile).
    command = cpp_builder.CppBuilder(
        name="o",
        sources="i",
        BuildOption=cpp_builder.CppTorchDeviceOptions(
            vec_isa=vec_isa,
            device_type=settings.get("device_type", "cpu"),
            aot_mode=settings.get("aot_mode", False),
        ),
    )
    real = getattr(codecache._precompile_header, "__wrapped__", codecache._precompile_header)
    path = real(request["header"], repr(command.get_command_line()), vec_isa=vec_isa, **settings)
    if request["name"] is not None and os.path.basename(path) != request["name"]:
        return False
    target = publish / header_store.PUBLISHED
    if header_store.published(target, os.path.basename(path)):  # linked, not made
        return True
    target.mkdir(parents=True, exist_ok=True)
    for file in (f"{path}.gch", path):  # the compiled header first: see the module's doc
        staged = target / f".{os.path.basename(file)}.{os.getpid()}"
        shutil.copyfile(file, staged)
        os.chmod(staged, 0o444)
        os.replace(staged, target / os.path.basename(file))
    return True


def main(argv: list[str]) -> int:
    publish = Path(os.environ[PUBLISH_ENV])
    requests = []
    for line in Path(argv[0]).read_text(encoding="utf-8").splitlines():
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if valid(request) and request not in requests:
            requests.append(request)
    if not requests:
        return 0
    # The CPU target's variables are read when torch is imported: one environment a run
    # (an action's requests share it).
    environment = requests[0]["environment"]
    os.environ.update(environment)
    temp_state.pin_temp_dirs()
    # What is published already is linked, so that inductor makes none of it again (a
    # companion the action has, or one another maker published meanwhile).
    header_store.link_store(
        publish / header_store.PUBLISHED, temp_state.shared_dir() / header_store.HEADERS
    )
    made = 0
    for request in requests:
        if request["environment"] != environment:
            continue
        if not header_store.published(publish / header_store.PUBLISHED, request["name"]):
            from torch._inductor import config

            with config.patch(request["configs"]):
                made += make(request, publish)
                also = companion(request)
                if also is not None:
                    make(also, publish)
    print(f"published {made} of {len(requests)} precompiled headers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
