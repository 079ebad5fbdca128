"""PyPI's torchvision beside a CPU build of torch: define its operator schemas before import.

    python_requirements(name = "pip", lock = "...", torchvision_cpu_ops = True)

PyPI's torchvision wheels for Linux x86-64 are CUDA builds. Beside a CPU torch
their C++ extension (torchvision/_C.so) cannot load, and `import torchvision`
(which timm does) then fails in torchvision/_meta_registrations.py with
"operator torchvision::nms does not exist": it registers fake kernels for two
operators the extension would have defined. Defining those two schemas first
(torch.library.Library("torchvision", "DEF")) lets the import succeed. The C++
operators themselves (nms, roi_align, deform_conv2d, ...) stay unavailable: a
model that calls them fails when it runs, which classification backbones
never do.

Opt-in, and only when needed: a torchvision whose extension loads defines the
namespace itself (a second definition would stop that), so the extension is
tried first, and nothing is done when torchvision is absent or already imported.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

# The operators _meta_registrations.py registers with torch.library.register_fake,
# which needs them defined; the others it skips when the extension is missing.
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
)
_library: list[Any] = []  # kept alive: the definitions last as long as the Library object


def define_ops() -> str:
    """Make `import torchvision` work on this torch; what was done, for logs and tests."""
    if "torchvision" in sys.modules:
        return "already imported"
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    # Any: torch.library and torch.ops carry no annotations mypy --strict accepts.
    torch: Any = importlib.import_module("torch")
    if _defined(torch):
        return "already defined"
    for extension in sorted(Path(spec.submodule_search_locations[0]).glob("_C*.so")):
        try:
            torch.ops.load_library(str(extension))
        except OSError:
            break
        return "extension loads"
    library = torch.library.Library("torchvision", "DEF")
    for schema in SCHEMAS:
        library.define(schema)
    _library.append(library)
    return "defined"


def _defined(torch: Any) -> bool:
    try:
        torch.ops.torchvision.nms.default  # noqa: B018 - the lookup is the test
    except (AttributeError, RuntimeError):
        return False
    return True
