"""Which Torch-TensorRT settings kiln keeps off, for the rules that refuse them and the
actions that pass them: one definition (rules/tensorrt/trt_engine.py,
kiln.actions.tensorrt.compiler).

Torch-TensorRT's engine cache is off on every compile: kiln's action keys decide reuse,
and that cache's key hashes only the sequence of op names (not the graph's wiring, scalar
arguments, weight shapes, TensorRT version or GPU), so it could hand one model's engine
to another.
"""

from __future__ import annotations

from types import MappingProxyType

ENGINE_CACHE_OFF = MappingProxyType({"cache_built_engines": False, "reuse_cached_engines": False})
# What cross_compile_for_windows forces off (and the Windows runtime lacks): recorded in the
# manifest, never passed; a target may not set them.
FORCED_OFF = MappingProxyType(
    {"use_python_runtime": False, "lazy_engine_init": False, **ENGINE_CACHE_OFF}
)
