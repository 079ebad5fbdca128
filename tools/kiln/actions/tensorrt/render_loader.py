"""TrtLoader: render the raw-engine loader of a trt_engine from its manifest.

Rendered in an action, not at analysis: the binding names, the number of
engines and the fallback ops are known only once the engine is built. Into
the directory output <name>_loader/ it writes

    <name>_trt.h, <name>_trt.cpp   class <Name> over the TensorRT runtime API
                                   (IRuntime::deserializeCudaEngine, named I/O tensors,
                                   setInputShape, enqueueV3 on a CUDA stream), checking
                                   every input shape against the manifest's ranges
    <name>_trt_run.cpp             a command-line runner: raw input files in, raw outputs out
    CMakeLists.txt                 builds both: MSVC on Windows (windows_x86_64), g++ on
                                   Linux (linux_x86_64), against TENSORRT_ROOT and CUDA
    load_<name>.py                 loading the .ep in Python on the target, as the manifest says

A raw-engine deployment needs exactly one engine and no PyTorch fallback ops;
when the build left more, this action fails and says which (cc_loader = False
renders only the Python example). The templates (rules/tensorrt/templates/) are
part of the action key: kiln.cc_templates declares them (kiln.code_digest).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kiln.action_specs import Binding, ShapeRange, TrtLoaderSpec, TrtManifest
from kiln.actions import spec as action_spec
from kiln.actions.spec import ActionFailure
from kiln.cc_templates import class_name, environment

# dtype names (torch's) -> nvinfer1::DataType enumerators and their sizes in bytes.
TRT_DTYPES = {
    "float32": ("kFLOAT", 4),
    "float16": ("kHALF", 2),
    "bfloat16": ("kBF16", 2),
    "int64": ("kINT64", 8),
    "int32": ("kINT32", 4),
    "int8": ("kINT8", 1),
    "uint8": ("kUINT8", 1),
    "bool": ("kBOOL", 1),
}


def main(spec: TrtLoaderSpec) -> None:
    manifest = TrtManifest.read(spec.manifest)
    output = Path(spec.output)
    output.mkdir(parents=True, exist_ok=True)
    for filename, text in render(manifest, cc_loader=spec.cc_loader).items():
        (output / filename).write_text(text)


def loader_files(name: str, *, cc_loader: bool = True) -> dict[str, str]:
    """The files of <name>_loader/ -> their templates."""
    files = {f"load_{name}.py": "trt_load.py.j2"}
    if cc_loader:
        files.update(
            {
                f"{name}_trt.h": "trt_loader.h.j2",
                f"{name}_trt.cpp": "trt_loader.cpp.j2",
                f"{name}_trt_run.cpp": "trt_run.cpp.j2",
                "CMakeLists.txt": "trt_CMakeLists.txt.j2",
            }
        )
    return files


def render(manifest: TrtManifest, *, cc_loader: bool = True) -> dict[str, str]:
    """File name -> text of the loader folder."""

    raw = manifest.raw_engine
    if cc_loader and not raw.deployable:
        raise ActionFailure(
            f"no raw-engine C++ loader for {manifest.label}: it needs exactly one TensorRT "
            f"engine and no PyTorch fallback ops, and the build left {'; '.join(raw.problems)}. "
            "Set require_full_compilation = True (and see which ops TensorRT cannot convert), "
            "or cc_loader = False to build the .ep and engines without the C++ loader"
        )
    env = environment()  # imports jinja2, which loading and query never need
    context = template_context(manifest, cc_loader=cc_loader)
    return {
        filename: env.get_template(template).render(context)
        for filename, template in loader_files(manifest.name, cc_loader=cc_loader).items()
    }


def template_context(manifest: TrtManifest, *, cc_loader: bool = True) -> dict[str, Any]:
    name = manifest.name
    windows = manifest.platform == "windows_x86_64"
    toolchain = manifest.toolchain
    rtx = toolchain.flavour == "rtx"
    version = str(toolchain.tensorrt or "")
    major, _, rest = version.partition(".")
    minor = rest.partition(".")[0]
    program = manifest.program
    context: dict[str, Any] = {
        "name": name,
        "label": manifest.label,
        "model_label": manifest.model,
        "class_name": class_name(name),
        "platform": manifest.platform,
        "windows": windows,
        "platform_text": "Windows x86-64" if windows else "Linux x86-64",
        "rtx": rtx,
        "tensorrt_name": "TensorRT-RTX" if rtx else "TensorRT",
        "tensorrt_version": version or "unknown",
        "library_names": _library_names(rtx=rtx, windows=windows, major=major, minor=minor),
        "toolchain": toolchain,
        "build_gpu": manifest.build_gpu,
        "compatibility": manifest.compatibility,
        "program_file": program.file,
        "program_from_loader": f"../{program.file}",
        "saved_with": program.saved_with,
        "load_code": program.load,
        "coded_save": program.saved_with != "torch_tensorrt.save",
        "inputs_json": json.dumps([_range_json(r) for r in manifest.inputs], indent=4),
        "py_inputs": manifest.inputs,
    }
    if not cc_loader:
        return context
    engine = manifest.engines[0]
    inputs = [_tensor(t, "input") for t in engine.inputs]
    outputs = [_tensor(t, "output") for t in engine.outputs]
    context.update(
        {
            "engine_file": engine.file.rsplit("/", 1)[-1],
            "engine_from_loader": f"../{engine.file}",
            "inputs": inputs,
            "outputs": outputs,
            "max_rank": max([t["rank"] for t in inputs + outputs] + [1]),
            "example_error": _example_error(inputs),
            "opt_shapes": ", ".join(
                "{" + ", ".join(str(d) for d in t["opt"]) + "}" for t in inputs
            ),
        }
    )
    return context


def _range_json(item: ShapeRange) -> dict[str, Any]:
    """An input's range as the Python example shows it: name, shapes, dtype."""
    return {
        "name": item.name,
        "min": list(item.min),
        "opt": list(item.opt),
        "max": list(item.max),
        "dtype": item.dtype,
    }


def _tensor(binding: Binding, kind: str) -> dict[str, Any]:
    dtype = binding.dtype
    if kind == "input" and (dtype is None or binding.min is None):
        raise ActionFailure(
            f"the manifest does not say the dtype and shape range of engine input "
            f"'{binding.name}' (it is not an input of the exported program)"
        )
    if dtype is not None and dtype not in TRT_DTYPES:
        raise ActionFailure(
            f"engine tensor '{binding.name}' has dtype {dtype}, unknown to TensorRT"
        )
    shapes = [binding.min, binding.opt, binding.max]
    rank = len(shapes[0]) if shapes[0] is not None else 0
    lo, opt, hi = ([(-1 if d is None else d) for d in s] if s is not None else [] for s in shapes)
    return {
        "name": binding.name,
        "dtype": dtype or "",
        "dtype_known": dtype is not None,
        "trt_dtype": TRT_DTYPES[dtype][0] if dtype else "kFLOAT",
        "rank": rank,
        "min": lo,
        "opt": opt,
        "max": hi,
    }


def _library_names(*, rtx: bool, windows: bool, major: str, minor: str) -> list[str]:
    """What find_library looks for: the TensorRT runtime library of the flavour and platform."""
    if rtx:
        if windows:
            return [f"tensorrt_rtx_{major}_{minor}", "tensorrt_rtx"]
        return ["tensorrt_rtx", f"libtensorrt_rtx.so.{major}"]  # the wheel ships only .so.N
    if windows:
        return [f"nvinfer_{major}", "nvinfer"]
    return ["nvinfer", f"libnvinfer.so.{major}"]


def _example_error(inputs: list[dict[str, Any]]) -> str:
    """The message of a bad input for the header's comment: a dimension past its max."""
    for wanted_dynamic in (True, False):
        for tensor in inputs:
            for axis, (lo, hi) in enumerate(zip(tensor["min"], tensor["max"], strict=True)):
                if (lo != hi) == wanted_dynamic:
                    return f"input '{tensor['name']}' dim {axis} is {hi + 1}, outside [{lo}, {hi}]"
    return f"expected {len(inputs)} input shapes, got {len(inputs) + 1}"


if __name__ == "__main__":
    action_spec.run(main, TrtLoaderSpec, sys.argv[1:])
