"""An exported program split into its structure and its weights (TorchExport's split).

    structure   the program with every parameter and buffer replaced by a meta tensor
                of the same dtype, shape and strides (tied names listed in the archive,
                TIES); tensor literals and plain tensor attributes of the code stay as
                they are. A few kilobytes, whatever the weights weigh.
    weights     name -> value of every parameter and buffer, as safetensors

The structure's bytes depend on the architecture alone, so AotiCompile, which reads
it, is keyed on the graph and on the weights' names, dtypes, shapes and strides,
never on their values: two weight sets of one architecture give one file.

The compile loads it with placeholders in place of the meta tensors (load_structure):
seeded noise (seeded by the name), never zeros or ones: a constant that is uniform,
zero or one is what a compiler may fold into code (Inductor's
`constant_fold_uniform_value`), so a placeholder must not look like one.
AotiCompile then checks that the compiled program holds every placeholder byte for
byte (kiln.actions.constant_layout): nothing of a value was folded into its code.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from kiln.actions.spec import ActionFailure

# The archive's record of tied weights: {other name: the name it ties to}.
TIES = "kiln/tied_weights.json"


def weights_of(program: torch.export.ExportedProgram) -> dict[str, torch.Tensor]:
    """name -> tensor of every parameter and buffer (persistent or not), in program order.

    These are AOTInductor's Parameter and Buffer constants, under the same names.
    """
    found = dict(program.state_dict)
    for name in program.graph_signature.non_persistent_buffers:
        found[name] = program.constants[name]
    return found


def split(program: torch.export.ExportedProgram) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Replaces the program's weights by meta tensors, in place; returns (the real values,
    the tied names: {other name: the first name of that tensor})."""
    first: dict[tuple[int, tuple[int, ...], tuple[int, ...]], str] = {}
    ties: dict[str, str] = {}
    real: dict[str, torch.Tensor] = {}
    for name, tensor in weights_of(program).items():
        _check_layout(name, tensor)
        tie = (tensor.untyped_storage().data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if tensor.numel() and tie in first:
            ties[name] = first[tie]
        first.setdefault(tie, name)
        meta = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")
        _replace(program, name, meta, like=tensor)
        real[name] = tensor.detach()
    return real, ties


def save_structure(program: torch.export.ExportedProgram, path: Path, ties: dict[str, str]) -> None:
    torch.export.save(program, path, extra_files={TIES: json.dumps(ties, sort_keys=True)})


def load_structure(path: str | Path, device: str) -> torch.export.ExportedProgram:
    """A structure with placeholders on `device` in place of its meta tensors, tied names
    sharing one."""
    extra = {TIES: ""}
    program = torch.export.load(path, extra_files=extra)
    ties: dict[str, str] = json.loads(extra[TIES] or "{}")
    made: dict[str, torch.Tensor] = {}
    for name, meta in weights_of(program).items():
        value = made.get(ties.get(name, name))
        if value is None:
            value = placeholder(name, meta).to(device)
            made[name] = value
        _replace(program, name, value, like=meta)
    return program


def _replace(
    program: torch.export.ExportedProgram, name: str, value: torch.Tensor, like: torch.Tensor
) -> None:
    if isinstance(like, torch.nn.Parameter):
        value = torch.nn.Parameter(value, requires_grad=like.requires_grad)
    if name in program.state_dict:
        program.state_dict[name] = value
    else:
        program.constants[name] = value


def placeholder(name: str, like: torch.Tensor) -> torch.Tensor:
    """Deterministic noise shaped as `like` (dtype, shape, strides), seeded by `name`."""
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") >> 1
    generator = torch.Generator().manual_seed(seed)
    noise = torch.rand(like.numel(), generator=generator, dtype=torch.float64)
    dtype = like.dtype
    if dtype == torch.bool:
        values = noise < 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        values = (noise + 0.5).to(dtype)  # in [0.5, 1.5): no zeros, never all one value
    else:
        values = (noise * 100).to(torch.int64).add(1).to(dtype)  # small, positive
    out = torch.empty_strided(like.shape, like.stride(), dtype=dtype)  # on the CPU
    out.copy_(values.reshape(like.shape))
    return out


def _check_layout(name: str, tensor: torch.Tensor) -> None:
    """A weight must be a dense tensor that is its whole storage (any dim order, e.g.
    channels_last): the blob a join writes holds each constant's storage, which such a
    tensor's values determine."""
    dense = tensor.storage_offset() == 0 and _dense(tensor)
    exact = tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    if not (dense and exact):
        raise ActionFailure(
            f"weight '{name}' (shape {list(tensor.shape)}, strides {list(tensor.stride())}, "
            f"storage offset {tensor.storage_offset()}) is a view into a larger tensor: kiln "
            "compiles the program once and joins the weights after, which needs every "
            "parameter and buffer to be a tensor of its own; give it one (e.g. "
            "nn.Parameter(t.clone())) in the model's factory"
        )


def _dense(tensor: torch.Tensor) -> bool:
    """Non-overlapping and dense: the strides are those of some permutation of the dims."""
    if tensor.numel() == 0:
        return True
    expected = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride(), strict=True), key=lambda d: d[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def save(weights: dict[str, torch.Tensor], path: Path) -> None:
    """The weights as safetensors: row-major values by name (tied names each get a copy)."""
    from safetensors.torch import save_file

    seen: set[int] = set()
    tensors = {}
    for name, tensor in weights.items():
        value = tensor.detach().cpu().contiguous()
        if value.untyped_storage().data_ptr() in seen:
            value = value.clone()
        seen.add(value.untyped_storage().data_ptr())
        tensors[name] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))


def restore(program: torch.export.ExportedProgram, weights: dict[str, torch.Tensor]) -> None:
    """Puts `weights` (name -> value, e.g. read from the weights file) back into a loaded
    structure in place of its placeholders, on their device and in their strides (ties
    kept)."""
    restored: dict[int, torch.Tensor] = {}
    for name, placeholder in weights_of(program).items():
        value = weights.get(name)
        if value is None:
            raise ActionFailure(f"the weights miss '{name}', a weight of the program")
        if value.dtype != placeholder.dtype or value.shape != placeholder.shape:
            raise ActionFailure(
                f"weight '{name}' is {value.dtype} {list(value.shape)}; the program takes "
                f"{placeholder.dtype} {list(placeholder.shape)}"
            )
        storage = placeholder.untyped_storage().data_ptr() if placeholder.numel() else None
        real = restored.get(storage) if storage is not None else None
        if real is None:
            real = torch.empty_strided(
                placeholder.shape,
                placeholder.stride(),
                dtype=placeholder.dtype,
                device=placeholder.device,
            ).copy_(value)
            if storage is not None:
                restored[storage] = real
        _replace(program, name, real, like=placeholder)
