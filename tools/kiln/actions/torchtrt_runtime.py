"""libtorchtrt_runtime.so for an action that only runs TensorRT engines (AotiValidate of a
TensorRT .pt2): the library alone, not `import torch_tensorrt`.

    torchtrt_runtime.load()   # torch.classes.tensorrt.Engine and tensorrt::execute_engine

Running a package needs only the ops and the engine class the runtime library registers.
`import torch_tensorrt` registers them too, and then its converters, its quantization
probes and an `importlib.metadata` scan of every installed distribution: 2.4 s on the
H100 (docs/gpu.md), a sixth of a weights-only rebuild of the mlp's TensorRT package.
The generated Python loader does the same (rules/aoti/templates/aoti_loader.py.j2,
`_load_torchtrt_runtime`); it cannot import kiln, so the few lines are its own.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

# Where the TensorRT wheels put TensorRT's own runtime library, which
# libtorchtrt_runtime.so needs and no loader path names: package folder -> library name.
TENSORRT_FOLDERS = {"tensorrt_rtx_libs": "libtensorrt_rtx.so", "tensorrt_libs": "libnvinfer.so"}


def load() -> str:
    """Load the runtime library (TensorRT's own first, RTLD_GLOBAL) where torch_tensorrt is
    installed; import torch_tensorrt where it is not laid out so. Says which it did."""
    import torch

    library = installed_runtime()
    if library is None:
        import torch_tensorrt  # noqa: F401 - registers the same ops and class

        return "import torch_tensorrt"
    tensorrt = _load_package_library()
    torch.ops.load_library(str(library))  # type: ignore[no-untyped-call]
    return f"{library} (TensorRT's library: {tensorrt or 'on the loader path'})"


def installed_runtime() -> Path | None:
    """torch_tensorrt's lib/libtorchtrt_runtime.so, found on sys.path without importing it."""
    for location in _package_folders("torch_tensorrt"):
        library = location / "lib" / "libtorchtrt_runtime.so"
        if library.is_file():
            return library
    return None


def _load_package_library() -> Path | None:
    for folder, name in TENSORRT_FOLDERS.items():
        for location in _package_folders(folder):
            found = sorted(location.glob(name + ".*"))
            if found:
                ctypes.CDLL(str(found[-1]), mode=ctypes.RTLD_GLOBAL)
                return found[-1]
    return None


def _package_folders(name: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
