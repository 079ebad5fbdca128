"""AotiValidate of a TensorRT .pt2 loads libtorchtrt_runtime.so alone, not torch_tensorrt:
the import cost 2.4 s of a weights-only rebuild's 12.6 s on the H100 (docs/gpu.md).
Against a stand-in wheel layout with empty libraries (tests/fake_tensorrt.py): the real
ones need a GPU."""

from __future__ import annotations

from pathlib import Path

from tests.fake_tensorrt import fake_tensorrt, run_python

LOAD = """
import sys
from kiln.actions import torchtrt_runtime
try:
    print(torchtrt_runtime.load())
except ImportError as error:
    print("ImportError:", error)
print("imported" if "torch_tensorrt" in sys.modules else "not imported")
maps = open("/proc/self/maps").read()
print("libtensorrt_rtx.so.1" in maps, "libtorchtrt_runtime.so" in maps)
"""


def _load(site: Path) -> list[str]:
    return run_python(LOAD, site=site).splitlines()


def test_the_runtime_library_loads_after_tensorrts_own_without_the_import(tmp_path: Path) -> None:
    site, runtime = fake_tensorrt(tmp_path)
    said, imported, mapped = _load(site)
    assert said.startswith(f"{runtime} (TensorRT's library: {site}/tensorrt_rtx_libs/")
    assert imported == "not imported"
    assert mapped == "True True"


def test_without_the_library_in_its_folder_torch_tensorrt_is_imported(tmp_path: Path) -> None:
    site, runtime = fake_tensorrt(tmp_path)
    runtime.unlink()
    said, _, mapped = _load(site)
    assert said == "ImportError: found, never imported"  # the fake package's import ran
    assert mapped == "False False"
