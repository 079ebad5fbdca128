"""The constants of a compiled AOTInductor program, and the weights blob that holds them.

With kiln's settings (aot_inductor.package_constants_in_so = False,
package_constants_on_disk_format = "binary_blob") AOTInductor writes the storage of
every constant, padded to its data size, one after the other into
data/aotinductor/model/<wrapper>_weights.blob, in the order of the model's constant
table, and the model loads them from there. That order and each constant's original
name, kind and data size come from the compiled model itself, through the C ABI every
AOTInductor library exports (torch/csrc/inductor/aoti_runtime/interface.h), not from
its generated source.

AotiCompile records the table as a ConstantLayout after checking that the blob it
compiled holds the structure's tensors unchanged: every placeholder of a weight
(kiln.actions.weights_split) byte for byte, and every code constant as the code has
it. Then no weight value was folded into code and no constant was derived from
weights at compile time, so a join of other weights (kiln.actions.aoti_join) gives
the program exactly those weights.
"""

from __future__ import annotations

import ctypes
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import torch
from torch.export.pt2_archive import PT2ArchiveReader

from kiln.action_specs import ConstantEntry, ConstantKind, ConstantLayout
from kiln.actions import weights_split
from kiln.actions.spec import ActionFailure

MODEL_DIR = "data/aotinductor/model/"
BLOB_SUFFIX = "_weights.blob"
METADATA_SUFFIX = "_metadata.json"

# torch/csrc/inductor/aoti_runtime/constant_type.h
_KINDS: dict[int, ConstantKind] = {1: "weight", 2: "weight", 3: "constant"}
_TYPE_NAMES = {0: "Unknown", 1: "Parameter", 2: "Buffer", 3: "TensorConstant", 4: "Folded"}


@dataclass(frozen=True)
class TableRow:
    """One row of a compiled model's constant table, as its C ABI reports it."""

    name: str
    fqn: str
    from_folded: bool
    type: int
    data_size: int


def records(archive: Path) -> list[str]:
    with PT2ArchiveReader(str(archive)) as reader:
        return list(reader.get_file_names())


def find_record(names: list[str], suffix: str) -> str | None:
    found = [n for n in names if n.startswith(MODEL_DIR) and n.endswith(suffix)]
    if len(found) > 1:
        raise ActionFailure(f"the compiled program holds several {suffix} files: {found}")
    return found[0] if found else None


def read_table(archive: Path, device: str) -> list[TableRow]:
    """The constant table of the package's model library, through its C ABI."""
    names = records(archive)
    library = find_record(names, ".wrapper.so") or find_record(names, ".so")
    if library is None:
        raise ActionFailure(f"{archive.name} holds no compiled model library (.so)")
    with _extracted(archive, library) as path, _loaded(path) as lib:
        handle = ctypes.c_void_p()
        _call(lib, "ContainerCreateWithDevice", ctypes.byref(handle), ctypes.c_size_t(1),
              device.encode(), str(path.parent).encode())  # fmt: skip
        try:
            return _rows(lib, handle)
        finally:
            _call(lib, "ContainerDelete", handle)


def _rows(lib: ctypes.CDLL, handle: ctypes.c_void_p) -> list[TableRow]:
    count = ctypes.c_size_t()
    _call(lib, "ContainerGetNumConstants", handle, ctypes.byref(count))
    rows = []
    for i in range(count.value):
        index = ctypes.c_size_t(i)
        name, fqn = ctypes.c_char_p(), ctypes.c_char_p()
        folded, kind, size = ctypes.c_bool(), ctypes.c_int32(), ctypes.c_size_t()
        _call(lib, "ContainerGetConstantName", handle, index, ctypes.byref(name))
        _call(lib, "ContainerGetConstantOriginalFQN", handle, index, ctypes.byref(fqn))
        _call(lib, "ContainerGetConstantFromFolded", handle, index, ctypes.byref(folded))
        _call(lib, "ContainerGetConstantType", handle, index, ctypes.byref(kind))
        _call(lib, "ContainerGetConstantDataSize", handle, index, ctypes.byref(size))
        rows.append(
            TableRow(
                name=(name.value or b"").decode(),
                fqn=(fqn.value or b"").decode(),
                from_folded=folded.value,
                type=kind.value,
                data_size=size.value,
            )
        )
    return rows


def _call(lib: ctypes.CDLL, function: str, *args: object) -> None:
    if getattr(lib, f"AOTInductorModel{function}")(*args) != 0:
        message = ctypes.c_char_p()
        last_error = getattr(lib, "AOTInductorGetLastError", None)
        if last_error is not None:
            last_error(ctypes.byref(message))
        detail = (message.value or b"no message").decode(errors="replace")
        raise ActionFailure(f"AOTInductorModel{function} failed on the compiled program: {detail}")


@contextmanager
def _extracted(archive: Path, record: str) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="kiln-constants-"))
    try:
        path = folder / PurePosixPath(record).name
        with PT2ArchiveReader(str(archive)) as reader:
            path.write_bytes(reader.read_bytes(record))
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _loaded(path: Path) -> Iterator[ctypes.CDLL]:
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    try:
        yield lib
    finally:
        # Workers compile many programs: unmap each library once its table is read.
        import _ctypes

        _ctypes.dlclose(lib._handle)


def layout_of(
    archive: Path, structure: torch.export.ExportedProgram, device: str
) -> ConstantLayout:
    """The checked ConstantLayout of `archive`, compiled from `structure`."""
    table = read_table(archive, device)
    rows = [row for row in table if not row.from_folded]
    folded = [row.fqn for row in table if row.from_folded]
    if folded:
        raise ActionFailure(
            f"the compiled program computes constants from weights when loaded ({folded[:3]}): "
            "kiln joins weights into a compiled program, which needs every constant stored"
        )
    names = records(archive)
    blob_record = find_record(names, BLOB_SUFFIX)
    if rows and blob_record is None:
        raise ActionFailure(
            "the compiled program has no weights blob: AOTInductor did not honour "
            "package_constants_on_disk_format = 'binary_blob'"
        )
    blob = b""
    if blob_record is not None:
        with PT2ArchiveReader(str(archive)) as reader:
            blob = reader.read_bytes(blob_record)
    weights = weights_split.weights_of(structure)
    code = {k: v for k, v in structure.constants.items() if k not in weights}
    covered = {row.fqn for row in rows} | {a for row in rows for a in _aliases(row.fqn, weights)}
    inlined = sorted(used_weights(structure) - covered)
    if inlined:
        raise ActionFailure(
            f"AOTInductor compiled the value of {len(inlined)} weight(s) into the program's "
            f"code ({', '.join(inlined[:5])}): small constants are inlined unless "
            "always_keep_tensor_constants is set, so other weights could not be joined in"
        )
    entries, offset = [], 0
    for row in rows:
        stored = blob[offset : offset + row.data_size]
        offset += row.data_size
        entries.append(_entry(row, stored, weights, code))
    if offset != len(blob):
        raise ActionFailure(
            f"the weights blob holds {len(blob)} bytes, its constants {offset}: this torch "
            "writes blobs another way than kiln reads them"
        )
    layout = ConstantLayout(blob=blob_record, constants=tuple(entries))
    if build_blob(layout, weights, blob) != blob:
        raise ActionFailure(
            "the compiled program's weights are not the placeholders it was compiled from: "
            "AOTInductor transformed or folded weight values at compile time (check "
            "inductor_configs), so weights cannot be joined into it"
        )
    return layout


# Ops whose result depends on their inputs' shapes, dtypes and devices, never on their
# values: Inductor drops what only feeds them, so the weights behind them are not kept
# (a program returning zeros_like(model(x)) reads no weight), and that is no inlining.
_SHAPE_ONLY = frozenset(
    {
        "empty_like",
        "full_like",
        "new_empty",
        "new_full",
        "new_ones",
        "new_zeros",
        "ones_like",
        "sym_numel",
        "sym_size",
        "sym_storage_offset",
        "sym_stride",
        "zeros_like",
    }
)


def used_weights(program: torch.export.ExportedProgram) -> set[str]:
    """The names of the parameters and buffers whose values the program's outputs depend
    on: the graph walked back from its outputs, through every input but those of
    shape-only ops."""
    signature = program.graph_signature
    by_input = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    pending = [node for node in program.graph.nodes if node.op == "output"]
    seen: set[torch.fx.Node] = set()
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "call_function" and getattr(node.target, "_opname", None) in _SHAPE_ONLY:
            continue
        pending.extend(node.all_input_nodes)
    return {
        by_input[node.name] for node in seen if node.op == "placeholder" and node.name in by_input
    }


def _entry(
    row: TableRow,
    stored: bytes,
    weights: Mapping[str, torch.Tensor],
    code: Mapping[str, torch.Tensor],
) -> ConstantEntry:
    kind = _KINDS.get(row.type)
    if kind is None and row.type == 0 and row.fqn in weights:
        # AOTInductor types the weights of a top-level nn.Sequential ("0.weight") as
        # Unknown. The name is one of the program's parameters or buffers, and the
        # blob check of layout_of holds its bytes to that placeholder's.
        kind = "weight"
    if kind == "weight":
        tensor = weights.get(row.fqn)
        if tensor is None:
            raise ActionFailure(
                f"the compiled program has a {_TYPE_NAMES[row.type].lower()} '{row.fqn}' that "
                "is not a parameter or buffer of the exported program"
            )
    elif kind == "constant":
        # Its name is AOTInductor's own (e.g. _tensor_constant0); find it by value: a
        # code constant is compiled as the code has it.
        same = (t for t in code.values() if _storage_bytes(t, row.data_size) == stored)
        tensor = next(same, None)
        if tensor is None:
            raise ActionFailure(
                f"the compiled program holds a constant '{row.fqn}' that is no tensor of the "
                "model's code: AOTInductor derived it from weights at compile time (check "
                "inductor_configs), so weights cannot be joined into it"
            )
    else:
        raise ActionFailure(
            f"the compiled program has a constant '{row.fqn}' of kind "
            f"{_TYPE_NAMES.get(row.type, row.type)}, which kiln cannot join weights into"
        )
    return ConstantEntry(
        name=row.name,
        fqn=row.fqn,
        kind=kind,
        dtype=str(tensor.dtype).removeprefix("torch."),
        shape=tuple(tensor.shape),
        stride=tuple(tensor.stride()),
        data_size=row.data_size,
        aliases=_aliases(row.fqn, weights) if kind == "weight" else (),
    )


def _aliases(fqn: str, weights: Mapping[str, torch.Tensor]) -> tuple[str, ...]:
    """The other names of the weight `fqn` names (the split keeps tied weights tied)."""
    tensor = weights.get(fqn)
    if tensor is None:
        return ()
    same = (tensor.untyped_storage().data_ptr(), tensor.shape, tensor.stride())
    return tuple(
        name
        for name, other in weights.items()
        if name != fqn
        and other.numel()
        and (other.untyped_storage().data_ptr(), other.shape, other.stride()) == same
    )


def build_blob(
    layout: ConstantLayout, weights: Mapping[str, torch.Tensor], program_blob: bytes
) -> bytes:
    """The weights blob of `layout` holding `weights`; code constants as `program_blob` has them."""
    out = bytearray()
    offset = 0
    for entry in layout.constants:
        if entry.kind == "constant":
            out += program_blob[offset : offset + entry.data_size]
        else:
            data = _storage_bytes(as_compiled(entry, weights[entry.fqn]), entry.data_size)
            if data is None:
                raise ActionFailure(f"weight '{entry.fqn}' does not fit its place in the blob")
            out += data
        offset += entry.data_size
    return bytes(out)


def as_compiled(entry: ConstantEntry, value: torch.Tensor) -> torch.Tensor:
    """`value` (a weight of `entry`) in the dtype, shape and strides the program was compiled
    for; ActionFailure if its dtype or shape is another."""
    dtype = str(value.dtype).removeprefix("torch.")
    if dtype != entry.dtype or tuple(value.shape) != entry.shape:
        raise ActionFailure(
            f"weight '{entry.fqn}' is {dtype} {list(value.shape)}; the compiled program "
            f"takes {entry.dtype} {list(entry.shape)}"
        )
    if tuple(value.stride()) == entry.stride and value.storage_offset() == 0:
        return value
    strided = torch.empty_strided(entry.shape, entry.stride, dtype=value.dtype)
    return strided.copy_(value)


def _storage_bytes(tensor: torch.Tensor, data_size: int) -> bytes | None:
    """A tensor's whole storage, zero-padded to `data_size`, as AOTInductor writes it
    (None if it is larger)."""
    storage = tensor.detach().cpu().untyped_storage()
    size = storage.nbytes()
    if size > data_size:
        return None
    data = ctypes.string_at(storage.data_ptr(), size) if size else b""
    return data + bytes(data_size - size)
