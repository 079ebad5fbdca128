"""The loaders of an aoti_package, C++ and Python, generated from the templates in templates/.

For `aoti_package(name = "resnet_pt2", ...)` in //models, analysis writes

    kiln-out/models/resnet_pt2_loader/
        resnet_pt2.h                 class ResnetPt2: loads the package, checks inputs, runs it
        resnet_pt2.cpp
        resnet_pt2Config.cmake       find_package(resnet_pt2) -> target resnet_pt2::resnet_pt2
        resnet_pt2.BUILD.bazel       cc_library(name = "resnet_pt2"), the .pt2 as data: the
                                     build_file of a repository over kiln-out/models (not
                                     named BUILD.bazel: that would make the folder a package
                                     of its own, and the library's labels invalid)

    kiln-out/models/resnet_pt2_loader.py   class ResnetPt2 for Python: the same checks,
                                           the same messages (InputError), outputs in the
                                           model's own structure

The classes check what a loaded AOTInductor package does not (torch-facts: it
checks nothing by default): the number of inputs, each input's dtype and
device, every static dimension against the example shape, every dynamic
dimension against its declared [min, max], and the values of integer inputs
that declare low/high (token ids past the vocabulary abort the process
otherwise). Everything is rendered here, at analysis time, into FileWrite actions.
"""

from __future__ import annotations

import keyword
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from kiln.rule_api import File, RuleContext, class_name, environment, weights_file_of
from kiln.rules.model.torch_model import TorchModelInfo

# torch_model's dtype names -> c10::ScalarType enumerators.
SCALAR_TYPES = {
    "float32": "Float",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "float64": "Double",
    "int64": "Long",
    "int32": "Int",
    "int8": "Char",
    "bool": "Bool",
}

# Names a parameter of operator() may not take (C++ keywords and alternative tokens).
_CXX_KEYWORDS = """alignas alignof and and_eq asm auto bitand bitor bool break case catch char
    char8_t char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast else
    enum explicit export extern false float for friend goto if inline int long mutable
    namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid
    typename union unsigned using virtual void volatile wchar_t while xor xor_eq"""
_CXX_RESERVED = frozenset(_CXX_KEYWORDS.split())

# The loader's own members and parameters, which an input's parameter must not shadow.
_TAKEN = frozenset({"inputs", "run", "check", "at", "c10", "std", "torch"})
_PY_TAKEN = frozenset({"self", "torch", "Any"})


@dataclass(frozen=True)
class LoaderSource:
    """What the templates are rendered from: one aoti_package's facts."""

    name: str  # the target name, e.g. "resnet_pt2"
    label: str  # "//models:resnet_pt2"
    model: TorchModelInfo
    device: str  # "cpu" | "cuda"
    backend: str  # "inductor" | "tensorrt"
    package: str  # the package's path from the loader folder: "../resnet_pt2.pt2"
    weights_form: str = "packaged"  # aoti_package(weights = ...): "packaged" | "separate"


def declare_loader_library(
    ctx: RuleContext[Any],
    *,
    package: File,
    model: TorchModelInfo,
    device: str,
    backend: str,
    weights_form: str = "packaged",
) -> list[File]:
    """Declares <name>_loader/...: the rendered sources, each a FileWrite action.

    The package stays beside the folder, not in it: a copy would be a second output
    with the same digest, i.e. the same cache blob, and storing it touches that blob
    while other actions (AotiValidate) read it.
    """
    name = ctx.name
    files = {f: ctx.declare_file(f"{name}_loader/{f}") for f in loader_files(name)}
    folder = posixpath.dirname(next(iter(files.values())).path)
    relative = posixpath.relpath(package.path, folder)
    source = LoaderSource(name, ctx.label, model, device, backend, relative, weights_form)
    for filename, text in render_loader(source).items():
        ctx.actions.write(files[filename], text)
    return list(files.values())


def declare_python_loader(
    ctx: RuleContext[Any],
    *,
    package: File,
    model: TorchModelInfo,
    device: str,
    backend: str,
    weights_form: str = "packaged",
) -> File:
    """Declares <name>_loader.py beside the package: one FileWrite action."""
    loader = ctx.declare_file(f"{ctx.name}_loader.py")
    if posixpath.dirname(loader.path) != posixpath.dirname(package.path):
        raise ValueError(f"the package {package.path} is not beside {loader.path}")
    # As seen from the C++ loader's folder, a sibling of both.
    package_file = posixpath.basename(package.path)
    source = LoaderSource(
        ctx.name, ctx.label, model, device, backend, f"../{package_file}", weights_form
    )
    ctx.actions.write(loader, render_python_loader(source))
    return loader


def render_python_loader(source: LoaderSource) -> str:
    """The text of <name>_loader.py."""
    return environment().get_template(PYTHON_TEMPLATE).render(template_context(source))


PYTHON_TEMPLATE = "aoti_loader.py.j2"


def loader_files(name: str) -> dict[str, str]:
    """The files of the loader folder of target `name` -> their templates."""
    return {
        f"{name}.h": "aoti_loader.h.j2",
        f"{name}.cpp": "aoti_loader.cpp.j2",
        f"{name}Config.cmake": "Config.cmake.j2",
        f"{name}.BUILD.bazel": "BUILD.bazel.j2",
    }


def render_loader(source: LoaderSource) -> dict[str, str]:
    """File name -> text of the generated library."""
    env = environment()  # imports jinja2, which loading and query never need
    context = template_context(source)
    return {
        filename: env.get_template(template).render(context)
        for filename, template in loader_files(source.name).items()
    }


def template_context(source: LoaderSource) -> dict[str, Any]:
    model = source.model
    signature = model.signature
    # (input name, axis) -> the dynamic dim bound there
    bound = {(n, axis): dim for dim in signature.dynamic_dims for n, axis in dim.axes.items()}
    index = {spec.name: i for i, spec in enumerate(signature.inputs)}
    params: set[str] = set()
    py_params: set[str] = set()
    inputs = []
    for spec in signature.inputs:
        dims = []
        for axis, size in enumerate(spec.shape):
            dim = bound.get((spec.name, axis))
            if dim is None:
                dims.append({"dynamic": "", "min": size, "max": size})
            else:
                dims.append({"dynamic": dim.name, "min": dim.min, "max": dim.max})
        inputs.append(
            {
                "name": spec.name,
                "param": _parameter(spec.name, params),
                "py_param": _py_parameter(spec.name, py_params),
                "dtype": spec.dtype,
                "scalar_type": SCALAR_TYPES[spec.dtype],
                "dims": dims,
                "low": spec.low,
                "high": spec.high,
            }
        )
    shared = [
        {
            "name": dim.name,
            "axes": sorted((index[name], axis) for name, axis in dim.axes.items()),
        }
        for dim in signature.dynamic_dims
        if len(dim.axes) > 1
    ]
    folder = f"{source.name}_loader"
    from_parent = posixpath.normpath(posixpath.join(folder, source.package))
    if from_parent.startswith("../") or posixpath.isabs(from_parent):
        raise ValueError(f"the package {source.package} is not under {folder}/..")
    return {
        "example_error": _example_error(inputs),
        "name": source.name,
        "folder": folder,
        "label": source.label,
        "class_name": class_name(source.name),
        "device": source.device,
        "backend": source.backend,
        "tensorrt": source.backend == "tensorrt",
        "package_file": posixpath.basename(source.package),
        "weights_form": source.weights_form,
        # The weights file aoti_package writes beside the package (rules/aoti/aoti_package.py).
        "weights_file": weights_file_of(posixpath.basename(source.package)),
        "weights_from_parent": weights_file_of(from_parent),
        "package_from_folder": source.package,
        "package_from_parent": from_parent,
        "model_label": model.label,
        "inputs": inputs,
        "input_names": ", ".join(spec.name for spec in signature.inputs),
        "max_rank": max((len(spec.shape) for spec in signature.inputs), default=0),
        "shared_dims": shared,
    }


def _example_error(inputs: list[dict[str, Any]]) -> str:
    """The message of a bad input, for the header's comment: a dynamic dim past its max."""
    for wanted in (True, False):
        for spec in inputs:
            for axis, dim in enumerate(spec["dims"]):
                if bool(dim["dynamic"]) == wanted:
                    where = f"input '{spec['name']}' dim {axis} is {dim['max'] + 1}"
                    if wanted:
                        return f"{where}, outside [{dim['min']}, {dim['max']}]"
                    return f"{where}, expected {dim['max']}"
    names = ", ".join(spec["name"] for spec in inputs)
    count = len(inputs)
    return f"expected {count} input{'s' if count != 1 else ''} ({names}), got {count + 1}"


def _parameter(name: str, taken: set[str]) -> str:
    """A C++ parameter name for an input: an identifier, no keyword, not used before."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name) or "input"
    if ident[0].isdigit():
        ident = f"input_{ident}"
    if ident.startswith("_"):  # leading underscores belong to the implementation
        ident = f"input{ident}"
    while ident in _CXX_RESERVED or ident in _TAKEN or ident in taken:
        ident += "_"
    taken.add(ident)
    return ident


def _py_parameter(name: str, taken: set[str]) -> str:
    """A Python parameter name for an input: an identifier, no keyword, not used before."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name) or "input"
    if ident[0].isdigit():
        ident = f"input_{ident}"
    while keyword.iskeyword(ident) or ident in _PY_TAKEN or ident in taken:
        ident += "_"
    taken.add(ident)
    return ident
