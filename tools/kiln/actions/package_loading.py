"""Loading an AOTInductor package, and a weights file into it, checked (Python's side).

    package = load("mlp_pt2.pt2", weights="mlp_pt2.weights.safetensors")  # weights: separate
    outputs = package(x)                                # the flat list of output tensors

or, with torch's own wrapper:

    package = torch._inductor.aoti_load_package("mlp_pt2.pt2")
    load_into(package, "mlp_pt2.weights.safetensors")

load() is AOTIModelPackageLoader, as C++ uses it: it imports no torch._inductor (1.5-2 s
in a fresh process, the most of what validating a small package costs) and compiles
nothing into inductor's cache, where aoti_load_package does both; and it needs no
Python type of the model's outputs (it returns them flat).

AOTInductor's load_constants checks none of what matters: it copies each tensor's
storage as it is (a wrong dtype is read as the compiled one, other strides are taken
as given, a larger tensor overruns its slot) and only warns about a missing buffer.
So the package's metadata lists its weights (kiln.weights: name -> [dtype, shape,
strides], written by AotiJoin), and this refuses a file that misses one, has a name
the package does not know, or a dtype or shape of its own; each tensor is copied into
the strides the program was compiled for, on the package's device (torch 2.13 refuses a
CPU tensor for a CUDA package's constant; 2.11 copied it). The generated C++ loader does
the same.
"""

from __future__ import annotations

import json
from typing import Any

from kiln.actions.errors import summary
from kiln.actions.spec import ActionFailure


def checked(metadata: dict[str, str], weights: dict[str, Any], source: str) -> dict[str, Any]:
    """`weights` (name -> tensor) as the package takes them: every one it needs, in its
    dtypes, shapes and strides, on its device; ActionFailure naming what is wrong otherwise."""
    import torch

    device = metadata.get("AOTI_DEVICE_KEY", "cpu")  # torch's key: "cpu", "cuda", ...

    if "kiln.weights" not in metadata:
        raise ActionFailure("the package lists no weights (kiln.weights): was it built by kiln?")
    expected: dict[str, list[Any]] = json.loads(metadata["kiln.weights"])
    unused = set(json.loads(metadata.get("kiln.weights_unused", "[]")))
    tied: dict[str, str] = json.loads(metadata.get("kiln.weights_tied", "{}"))
    missing = [name for name in expected if name not in weights]
    unknown = [n for n in weights if n not in expected and n not in unused and n not in tied]
    problems = [
        f"'{alias}' differs from '{name}', which the package holds as one tensor"
        for alias, name in tied.items()
        if alias in weights and name in weights and not torch.equal(weights[alias], weights[name])
    ]
    if missing:
        problems.append(f"missing {len(missing)}: {', '.join(missing[:5])}")
    if unknown:
        problems.append(f"not weights of this package: {', '.join(unknown[:5])}")
    out = {}
    for name, (dtype, shape, stride) in expected.items():
        value = weights.get(name)
        if value is None:
            continue
        have = str(value.dtype).removeprefix("torch.")
        if have != dtype or list(value.shape) != shape:
            problems.append(f"'{name}' is {have} {list(value.shape)}, expected {dtype} {shape}")
            continue
        out[name] = torch.empty_strided(shape, stride, dtype=value.dtype, device=device).copy_(
            value
        )
    if problems:
        raise ActionFailure(f"weights {source} do not fit the package: {'; '.join(problems)}")
    return out


def load_into(package: Any, path: str) -> None:
    """Loads the weights file at `path` into `package` (an AOTICompiledModel)."""
    from safetensors.torch import load_file

    weights = checked(package.get_metadata(), load_file(path), path)
    package.load_constants(weights, check_full_update=True)


class Package:
    """A loaded package: call it with the input tensors, get the output tensors, flat."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __call__(self, *inputs: Any) -> list[Any]:
        return list(self.loader.boxed_run(list(inputs)))

    def metadata(self) -> dict[str, str]:
        return dict(self.loader.get_metadata())


def load(path: str, weights: str | None = None) -> Package:
    """The package at `path`; for weights = "separate", with the weights file `weights`."""
    import torch

    try:
        loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, -1)
    except Exception as error:
        raise ActionFailure(f"the package {path} does not load: {summary(error)}") from error
    if weights is not None:
        fill(loader, weights)
    return Package(loader)


def fill(loader: Any, weights: str) -> None:
    """Loads the weights file `weights` into an AOTIModelPackageLoader, checked.

    Positionally only what torch 2.11 and 2.13 both take (constants, use_inactive,
    check_full_update): 2.13 added a fifth, allow_h2d_copy, and a call passing it failed
    every `weights = "separate"` CUDA package on the GPU machine's 2.11."""
    from safetensors.torch import load_file

    tensors = checked(dict(loader.get_metadata()), load_file(weights), weights)
    loader.load_constants(tensors, False, True)
