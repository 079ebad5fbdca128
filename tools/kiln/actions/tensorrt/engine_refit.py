"""AotiRefit's direct path: new weights into a TensorRT .pt2's engines with TensorRT's own
Refitter, without Torch-TensorRT's module machinery.

Torch-TensorRT's refit_module_weights (kiln.actions.tensorrt.refit) imports
torch_tensorrt (2.4 s), loads TrtCompile's refittable program, deep-copies it, lowers
and partitions the whole new program, and on TensorRT-RTX then falls back to its slow
refit, which interprets the graph into a TensorRT network again: 14.3 s of a 26 s
weights-only rebuild of ResNet-18 on the H100 (docs/gpu.md). Everything an engine's
refit needs is already at hand:

    the engine          base64 in its TorchBind object's pickled state
                        (the package's `data/constants/custom_obj_<i>` record: a
                        torch._C._pickle_save archive whose data.pkl holds the state)
    where each weight   the weight name map Torch-TensorRT recorded at compile time in
    comes from          the engine's metadata: engine weight name -> [state-dict name,
                        dtype], and `constant_mapping` (small constants, by value).
                        TrtCompile compiled the structure with seeded noise for
                        placeholders (kiln.actions.weights_split), distinct for every
                        weight, so Torch-TensorRT's search by value pinned each name to
                        the weight it is
    the new values      TorchExport's weights file, under the same names
    batch norms' eps    the structure's graph (kiln.actions.tensorrt.structure_facts)

So: plan every refittable weight of the engine (weight_sources), refit it (refit), and
splice the new engine into the record (with_engine). Whatever cannot be planned exactly
(a constant Torch-TensorRT's lowering folded, `_frozen_param<n>`, which only the
lowering computes; a batch norm folded into SCALE/SHIFT; a weight the map does not
name; a record or map of a layout this does not know) raises NotDirect, and AotiRefit
refits through Torch-TensorRT as before, saying why. AotiValidate then checks the
package against eager's outputs with the new weights, as it does after either path.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import io
import pickle
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.actions.tensorrt.refit_constants import EPS_CONSTANT
from kiln.actions.tensorrt.structure_facts import structure_facts

# Torch-TensorRT 2.11-2.13's serialized engine layout (torch.ops.tensorrt.<NAME>_IDX).
ENGINE_IDX = 3
SERIALIZED_METADATA_IDX = 7
# The TorchBind class whose state the record holds.
ENGINE_CLASS = ("__torch__.torch.classes.tensorrt", "Engine")
# pickle's string ops: name -> (opcode, bytes of its length field)
_STRING_OPS = {
    "BINUNICODE": (b"X", 4),
    "BINUNICODE8": (b"\x8d", 8),
    "SHORT_BINUNICODE": (b"\x8c", 1),
}
# Records torch's archive writer writes itself.
_WRITER_RECORDS = ("version", ".data/serialization_id")


class NotDirect(Exception):
    """Why this engine cannot be refit directly (AotiRefit takes Torch-TensorRT's refit)."""


@dataclass(frozen=True)
class EngineRecord:
    """A package's engine object as its record holds it."""

    state: list[str]  # Torch-TensorRT's serialized engine list
    pickle: bytes  # the record's data.pkl

    @property
    def engine(self) -> bytes:
        return base64.b64decode(self.state[ENGINE_IDX])

    def weight_name_map(self) -> dict[str, Any]:
        """The map Torch-TensorRT recorded in the engine's metadata (a copy)."""
        encoded = self.state[SERIALIZED_METADATA_IDX]
        try:
            metadata = _MetadataUnpickler(io.BytesIO(base64.b64decode(encoded))).load()
        except Exception as error:
            raise NotDirect(f"the engine's metadata cannot be read ({error!r})") from error
        found = metadata.get("weight_name_map") if isinstance(metadata, dict) else None
        if not found:
            raise NotDirect("the engine records no weight name map")
        return dict(found)


@dataclass(frozen=True)
class FromWeights:
    """A weight taken from the weights file by name."""

    name: str


@dataclass(frozen=True)
class Constant:
    """A weight whose value the plan holds (a small constant, a batch norm's eps)."""

    value: Any  # numpy array


Source = FromWeights | Constant


# -- the record ---------------------------------------------------------------------


def read_record(record: bytes) -> EngineRecord:
    """The engine's state from its record (torch._C._pickle_save's archive)."""
    try:
        with zipfile.ZipFile(io.BytesIO(record)) as archive:
            pkl = archive.read(_data_pkl(archive))
    except (zipfile.BadZipFile, KeyError) as error:
        raise NotDirect(f"the engine record is not a TorchBind archive ({error})") from error
    try:
        obj = _StateUnpickler(io.BytesIO(pkl)).load()
    except Exception as error:
        raise NotDirect(f"the engine record's state cannot be read ({error!r})") from error
    state = obj.state if isinstance(obj, _TorchBindObject) else None
    if isinstance(state, (list, tuple)) and state and isinstance(state[0], (list, tuple)):
        state = state[0]
    if not isinstance(state, (list, tuple)) or len(state) <= SERIALIZED_METADATA_IDX:
        raise NotDirect("the engine record holds no Torch-TensorRT engine state")
    if not all(isinstance(item, str) for item in state):
        raise NotDirect("the engine record's state is not a list of strings")
    return EngineRecord(state=list(state), pickle=pkl)


def with_engine(record: bytes, engine: bytes, old: EngineRecord | None = None) -> bytes:
    """The record with its engine replaced by `engine` (raw TensorRT bytes): data.pkl's
    engine string spliced, every other byte of the state as it was, rewritten with torch's
    own archive writer (as torch._C._pickle_save writes it). `old`: the record as read."""
    old = old or read_record(record)
    encoded = base64.b64encode(engine)
    pkl = _spliced(old.pickle, old.state[ENGINE_IDX].encode("ascii"), encoded)
    rewritten = _rezipped(record, pkl)
    # Read back as any reader will: the splice must leave a pickle of the same state.
    expected = [*old.state[:ENGINE_IDX], encoded.decode("ascii"), *old.state[ENGINE_IDX + 1 :]]
    if read_record(rewritten).state != expected:
        raise NotDirect("the spliced engine record does not read back as written")
    return rewritten


def _spliced(pkl: bytes, old: bytes, new: bytes) -> bytes:
    """data.pkl with the one string op holding `old` (ASCII: base64) replaced by one
    holding `new`. Found by its bytes (the op, its length, the string), not by walking
    the pickle: pickletools would decode every string of tens of MB on the way."""
    found = []
    for op, width in _STRING_OPS.values():
        if len(old) >= 1 << (8 * width):
            continue
        header = op + len(old).to_bytes(width, "little")
        lead = header + old[:64]  # found fast; the rest compared in place, not copied
        at = pkl.find(lead)
        while at != -1:
            start = at + len(header)
            if pkl.startswith(old, start):
                found.append((at, start + len(old)))
            at = pkl.find(lead, at + 1)
    if len(found) != 1:
        raise NotDirect(f"the engine string occurs {len(found)} times in the record's state")
    start, end = found[0]
    if len(new) < 2**32:
        op = b"X" + len(new).to_bytes(4, "little")
    else:
        op = b"\x8d" + len(new).to_bytes(8, "little")
    return b"".join((pkl[:start], op, new, pkl[end:]))


def _rezipped(record: bytes, pkl: bytes) -> bytes:
    import torch

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(record)) as archive:
        top = _data_pkl(archive).rsplit("/", 1)[0] + "/"
        writer = torch._C.PyTorchFileWriter(out)
        for info in archive.infolist():
            name = info.filename[len(top) :] if info.filename.startswith(top) else None
            if name is None or name in _WRITER_RECORDS:
                continue
            data = pkl if name == "data.pkl" else archive.read(info)
            writer.write_record(name, data, len(data))
        writer.write_end_of_file()
    return out.getvalue()


def _data_pkl(archive: zipfile.ZipFile) -> str:
    names = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(names) != 1:
        raise KeyError("no single <archive>/data.pkl")
    return names[0]


class _TorchBindObject:
    """A TorchBind object as the record pickles it: the class, then its state (BUILD)."""

    def __init__(self, *args: Any) -> None:
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _restore_type_tag(value: Any, type_tag: str) -> Any:
    """torch's pickler tags a typed list with its type ("List[str]"): the list as it is."""
    return value


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ENGINE_CLASS:
            return _TorchBindObject
        if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
            return _restore_type_tag
        raise pickle.UnpicklingError(f"{module}.{name} in an engine record")


class _Opaque:
    """What the metadata holds of Torch-TensorRT's own types (its settings): not needed,
    and not worth importing torch_tensorrt for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Opaque:
        return _Opaque()


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.partition(".")[0] in ("torch_tensorrt", "tensorrt", "tensorrt_rtx"):
            return _Opaque
        return super().find_class(module, name)


# -- the plan -----------------------------------------------------------------------


def weight_sources(
    weight_name_map: Mapping[str, Any],
    engine_weights: list[str],
    weight_names: set[str],
    batch_norm_eps: Callable[[], dict[str, float]],
) -> dict[str, Source]:
    """Where each of the engine's refittable weights comes from; NotDirect naming the
    first it cannot place exactly. `batch_norm_eps` ({batch norm node: eps}) is asked
    for only where an eps is missing."""
    constants = weight_name_map.get("constant_mapping") or {}
    sources: dict[str, Source] = {}
    eps: dict[str, float] | None = None
    for weight in engine_weights:
        entry = weight_name_map.get(weight)
        name = entry[0] if isinstance(entry, (list, tuple)) and len(entry) == 2 else None
        if isinstance(name, str) and name in weight_names:
            sources[weight] = FromWeights(name)
        elif weight in constants:
            sources[weight] = Constant(constants[weight])
        elif EPS_CONSTANT.fullmatch(weight) and (not name or name.endswith(".unknown")):
            if eps is None:
                eps = batch_norm_eps()
            sources[weight] = Constant(_eps_of(weight, eps))
        elif isinstance(name, (list, tuple)):
            raise NotDirect(f"{weight!r} is a folded batch norm ({', '.join(map(str, name))})")
        elif isinstance(name, str) and name:
            raise NotDirect(
                f"{weight!r} comes from {name!r}, which the weights file lacks (a constant "
                "Torch-TensorRT's lowering computed)"
            )
        else:
            raise NotDirect(f"the weight name map does not say where {weight!r} comes from")
    return sources


def _eps_of(weight: str, eps: dict[str, float]) -> float:
    match = EPS_CONSTANT.fullmatch(weight)
    node = match.group(1) if match else ""
    if node in eps:
        return eps[node]
    values = set(eps.values())
    if len(values) == 1:  # every batch norm of the model has the same: that is its eps
        return values.pop()
    raise NotDirect(f"no batch norm {node!r} in the structure to take {weight!r} from")


# -- the refit ----------------------------------------------------------------------


def tensorrt_module() -> Any:
    """The TensorRT Python module the installed Torch-TensorRT runs on."""
    rtx = _installed("torch_tensorrt_rtx") or not _installed("torch_tensorrt")
    name = "tensorrt_rtx" if rtx and importlib.util.find_spec("tensorrt_rtx") else "tensorrt"
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise NotDirect(f"no TensorRT Python module ({error})") from error


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class Refit:
    engine: bytes  # the refit engine, serialized with its weights
    taken: frozenset[str]  # the names it took from the weights file
    constants: int


def refit(
    trt: Any,
    engine: bytes,
    weight_name_map: Mapping[str, Any],
    weights: Mapping[str, Any],
    batch_norm_eps: dict[str, float],
) -> Refit:
    """The engine with every refittable weight set from its source (torch tensors by name
    in `weights`), serialized as Torch-TensorRT serializes a refit engine."""
    import numpy as np
    import torch

    logger = trt.Logger(trt.Logger.WARNING)
    cuda_engine = trt.Runtime(logger).deserialize_cuda_engine(engine)
    if cuda_engine is None:
        raise NotDirect("TensorRT cannot deserialize the package's engine")
    refitter = trt.Refitter(cuda_engine, logger)
    names = list(refitter.get_all_weights())
    sources = weight_sources(weight_name_map, names, set(weights), lambda: batch_norm_eps)
    kept = []  # the host buffers TensorRT reads until refit_cuda_engine returns
    for name in names:
        prototype = refitter.get_weights_prototype(name)
        dtype = _torch_dtype(trt, prototype.dtype)
        source = sources[name]
        if isinstance(source, FromWeights):
            value = weights[source.name]
        else:
            value = torch.from_numpy(np.ascontiguousarray(source.value))
            if value.numel() == 1 and prototype.size > 1:  # one eps for every channel
                value = value.reshape(-1).expand(int(prototype.size))
        value = value.detach().reshape(-1).to(dtype).contiguous()
        if value.numel() != prototype.size:
            raise NotDirect(
                f"{name!r} takes {prototype.size} values, its source has {value.numel()}"
            )
        kept.append(value)
        weight = trt.Weights(prototype.dtype, value.data_ptr(), value.numel())
        refitter.set_named_weights(name, weight, trt.TensorLocation.HOST)
    missing = list(refitter.get_missing_weights())
    if missing:
        raise NotDirect(f"TensorRT still misses {len(missing)} weight(s): {missing[:3]}")
    if not refitter.refit_cuda_engine():
        raise NotDirect("TensorRT's refit_cuda_engine failed")
    config = cuda_engine.create_serialization_config()
    config.clear_flag(trt.SerializationFlag.EXCLUDE_WEIGHTS)
    if hasattr(trt.SerializationFlag, "INCLUDE_REFIT"):  # TensorRT 10.14 and later
        config.set_flag(trt.SerializationFlag.INCLUDE_REFIT)
    serialized = cuda_engine.serialize_with_config(config)
    taken = frozenset(s.name for s in sources.values() if isinstance(s, FromWeights))
    return Refit(
        engine=bytes(serialized),
        taken=taken,
        constants=sum(isinstance(s, Constant) for s in sources.values()),
    )


def _torch_dtype(trt: Any, dtype: Any) -> Any:
    import torch

    table = {
        "FLOAT": torch.float32,
        "HALF": torch.float16,
        "BF16": torch.bfloat16,
        "INT32": torch.int32,
        "INT64": torch.int64,
        "INT8": torch.int8,
        "BOOL": torch.bool,
    }
    found = table.get(str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1].upper())
    if found is None:
        raise NotDirect(f"a weight of TensorRT type {dtype} (not planned for)")
    return found


# -- the package ------------------------------------------------------------------


@dataclass(frozen=True)
class DirectRefit:
    records: dict[str, str]  # constant -> the package record of its engine object
    replace: dict[str, bytes]  # package record -> its new bytes
    engines: dict[str, bytes]  # constant -> the refit engine
    detail: str


def refit_package(package: Path, weights_file: Path, structure: Path) -> DirectRefit:
    """Every engine of the package refit with the weights file's values; NotDirect where
    one of them cannot be (nothing is written either way)."""
    from safetensors.torch import load_file
    from torch.export.pt2_archive import PT2ArchiveReader

    from kiln.actions.tensorrt.package_archive import engine_records

    records = engine_records(package)
    if not records:
        raise NotDirect("the package holds no engine object")
    trt = tensorrt_module()
    weights = load_file(str(weights_file))
    facts = structure_facts(structure)
    replace: dict[str, bytes] = {}
    engines: dict[str, bytes] = {}
    taken: set[str] = set()
    set_by_value = 0
    with PT2ArchiveReader(str(package)) as reader:
        for constant, record in sorted(records.items()):
            data = reader.read_bytes(record)
            engine = read_record(data)
            done = refit(
                trt, engine.engine, engine.weight_name_map(), weights, facts.batch_norm_eps
            )
            replace[record] = with_engine(data, done.engine, engine)
            engines[constant] = done.engine
            taken |= done.taken
            set_by_value += done.constants
    # A weight the graph reads that no engine takes is read by the program around the
    # engines: its wrapper was compiled with the structure's placeholder for it, so the
    # package must be compiled again (AotiRefit's Torch-TensorRT path does).
    outside = sorted(facts.used_weights - taken)
    if outside:
        raise NotDirect(
            f"the program around the engines reads {len(outside)} weight(s) of its own "
            f"({', '.join(outside[:5])}), compiled into the package's wrapper"
        )
    set_by_name = len(taken)
    detail = (
        f"refit with TensorRT's Refitter into the package's {len(engines)} engine(s): "
        f"{set_by_name} weights by name from the weights file, {set_by_value} constants "
        "(Torch-TensorRT's weight name map and the batch norms' eps); no engine build, no "
        "Torch-TensorRT lowering"
    )
    return DirectRefit(records=records, replace=replace, engines=engines, detail=detail)
