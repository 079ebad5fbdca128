"""AotiRefit's direct path (kiln.actions.tensorrt.engine_refit): a TensorRT .pt2's engines
refit with TensorRT's Refitter from the weight name map Torch-TensorRT recorded.

TensorRT itself is a stand-in here (FakeTensorRT: it records what it is given, reading
the host buffers as TensorRT would); the real Refitter runs on the GPU machine
(tools/gpu_trt_package_check.sh, docs/gpu.md). The engine records are written with
torch's own archive writer, in the layout torch._C._pickle_save gives a TorchBind
object (checked against a real TorchBind object's record below).
"""

from __future__ import annotations

import base64
import ctypes
import io
import pickle
import pickletools
import sys
import types
import zipfile
from typing import Any

import numpy as np
import pytest
import torch
from kiln.actions.tensorrt import engine_refit
from kiln.actions.tensorrt.engine_refit import Constant, FromWeights, NotDirect

pytestmark = pytest.mark.torch

EPS = "layer1.0.bn1/_native_batch_norm_legit_no_training_3_eps CONSTANT"


def engine_state(engine: bytes, metadata: dict[str, Any]) -> list[str]:
    """Torch-TensorRT's serialized engine list (ABI, name, device, engine, inputs, outputs,
    hardware compatible, metadata, platform)."""
    return [
        "8",
        "_run_on_acc_0",
        "0%8%9%0%NVIDIA H100",
        base64.b64encode(engine).decode(),
        "x",
        "output0",
        "0",
        base64.b64encode(pickle.dumps(metadata)).decode(),
        "linux_x86_64",
    ]


def torchbind_record(state: list[str]) -> bytes:
    """What torch._C._pickle_save writes for a torch.classes.tensorrt.Engine (seen on the
    H100, torch 2.11): an archive whose data.pkl is GLOBAL, EMPTY_TUPLE, NEWOBJ, the state
    list tagged with its type (torch.jit._pickle.restore_type_tag(list, "List[str]")),
    BUILD."""
    pkl = bytearray(b"\x80\x02c__torch__.torch.classes.tensorrt\nEngine\nq\x00)\x81")
    pkl += b"ctorch.jit._pickle\nrestore_type_tag\nq\x01]q\x02("
    for i, item in enumerate(state):
        data = item.encode()
        pkl += b"X" + len(data).to_bytes(4, "little") + data + b"q" + bytes([i + 3])
    pkl += b"eX\t\x00\x00\x00List[str]\x86R" + b"b."
    out = io.BytesIO()
    writer = torch._C.PyTorchFileWriter(out)
    writer.write_record("data.pkl", bytes(pkl), len(pkl))
    writer.write_record("byteorder", b"little", 6)
    writer.write_end_of_file()
    return out.getvalue()


def test_a_torchbind_record_is_the_archive_this_reads() -> None:
    # A real TorchBind object (quantized linear's packed parameters): the same archive
    # layout, data.pkl opening with the class's GLOBAL, EMPTY_TUPLE, NEWOBJ.
    weight = torch.quantize_per_tensor(torch.randn(4, 4), 0.1, 0, torch.qint8)
    real = bytes(torch._C._pickle_save(torch.ops.quantized.linear_prepack(weight, None)))
    with zipfile.ZipFile(io.BytesIO(real)) as archive:
        names = archive.namelist()
        pkl = archive.read("archive/data.pkl")
    assert {"archive/data.pkl", "archive/version", "archive/byteorder"} <= set(names)
    ops = [op.name for op, _, _ in pickletools.genops(pkl)]
    synthetic = torchbind_record(engine_state(b"e", {}))
    with zipfile.ZipFile(io.BytesIO(synthetic)) as archive:
        ours = [op.name for op, _, _ in pickletools.genops(archive.read("archive/data.pkl"))]
    assert ops[:5] == ours[:5] == ["PROTO", "GLOBAL", "BINPUT", "EMPTY_TUPLE", "NEWOBJ"]
    assert "BUILD" in ops[-3:] and "BUILD" in ours[-3:] and ops[-1] == ours[-1] == "STOP"


def test_the_engine_and_its_metadata_are_read_from_the_record() -> None:
    state = engine_state(b"\x00engine\xff", {"weight_name_map": {"w KERNEL": ["fc.weight", 0]}})
    record = engine_refit.read_record(torchbind_record(state))
    assert record.engine == b"\x00engine\xff"
    assert record.weight_name_map() == {"w KERNEL": ["fc.weight", 0]}


def test_the_refit_engine_is_spliced_in_and_nothing_else_changes() -> None:
    state = engine_state(b"old engine", {"weight_name_map": {"a": ["b", 0]}})
    record = torchbind_record(state)
    rewritten = engine_refit.with_engine(record, b"the refit engine, longer than the old")
    new = engine_refit.read_record(rewritten).state
    assert new[3] == base64.b64encode(b"the refit engine, longer than the old").decode()
    assert new[:3] + new[4:] == state[:3] + state[4:]
    # the same engine gives the record back byte for byte: only the engine string changes
    assert engine_refit.with_engine(record, b"old engine") == record


def test_a_record_of_another_layout_is_not_refit_directly() -> None:
    with pytest.raises(NotDirect, match="not a TorchBind archive"):
        engine_refit.read_record(b"STANDIN|engine|names")
    other = torchbind_record(["just", "three", "strings"])
    with pytest.raises(NotDirect, match="no Torch-TensorRT engine state"):
        engine_refit.read_record(other)


def test_the_metadata_is_read_without_importing_torch_tensorrt(monkeypatch: Any) -> None:
    # Torch-TensorRT pickles its CompilationSettings beside the map: read as opaque.
    module = types.ModuleType("torch_tensorrt.dynamo._settings")

    class CompilationSettings:
        def __init__(self) -> None:
            self.workspace_size = 1

    CompilationSettings.__module__ = module.__name__
    CompilationSettings.__qualname__ = "CompilationSettings"
    module.CompilationSettings = CompilationSettings  # type: ignore[attr-defined]
    packages = ["torch_tensorrt", "torch_tensorrt.dynamo"]
    for name in packages:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    metadata = {"settings": CompilationSettings(), "weight_name_map": {"a": ["b", np.float32]}}
    state = engine_state(b"e", metadata)
    for name in [*packages, module.__name__]:
        monkeypatch.delitem(sys.modules, name)
    assert "torch_tensorrt" not in sys.modules
    assert engine_refit.read_record(torchbind_record(state)).weight_name_map() == {
        "a": ["b", np.float32]
    }
    assert "torch_tensorrt" not in sys.modules


def test_engine_without_a_weight_name_map_is_not_refit_directly() -> None:
    record = engine_refit.read_record(torchbind_record(engine_state(b"e", {"settings": None})))
    with pytest.raises(NotDirect, match="no weight name map"):
        record.weight_name_map()


# -- the plan -------------------------------------------------------------------------


def sources(weight_map: dict[str, Any], engine_weights: list[str], **kw: Any) -> dict[str, Any]:
    names = kw.get("names", {"conv1.weight", "bn1.weight", "fc.weight"})
    eps = kw.get("eps", {"_native_batch_norm_legit_no_training_3": 1e-3})
    return engine_refit.weight_sources(weight_map, engine_weights, names, lambda: eps)


def test_weights_are_taken_by_the_names_the_map_gives() -> None:
    plan = sources(
        {"conv KERNEL": ["conv1.weight", np.float32], "bn CONSTANT": ["bn1.weight", np.float32]},
        ["conv KERNEL", "bn CONSTANT"],
    )
    assert plan == {
        "conv KERNEL": FromWeights("conv1.weight"),
        "bn CONSTANT": FromWeights("bn1.weight"),
    }


def test_small_constants_come_from_the_map_and_eps_from_the_graph() -> None:
    one = np.array([2.0], dtype=np.float32)
    plan = sources(
        {
            "c CONSTANT": ["", np.float32],
            "constant_mapping": {"c CONSTANT": one},
            EPS: ["", np.float32],
        },
        ["c CONSTANT", EPS],
    )
    assert plan["c CONSTANT"] == Constant(one)
    assert plan[EPS] == Constant(1e-3)


def test_an_eps_of_an_unknown_node_is_the_models_one_eps() -> None:
    plan = sources({}, [EPS], eps={"_native_batch_norm_legit_no_training": 1e-5})
    assert plan[EPS] == Constant(1e-5)
    with pytest.raises(NotDirect, match="no batch norm"):
        sources({}, [EPS], eps={"bn_a": 1e-5, "bn_b": 1e-3})


def test_what_only_the_lowering_computes_is_not_refit_directly() -> None:
    with pytest.raises(NotDirect, match=r"'_frozen_param0'.*lowering"):
        sources({"fc KERNEL": ["_frozen_param0", np.float32]}, ["fc KERNEL"])
    with pytest.raises(NotDirect, match="folded batch norm"):
        sources({"bn SCALE": [["bn1.weight", "bn1.bias"], np.float32]}, ["bn SCALE"])
    with pytest.raises(NotDirect, match="does not say where 'mystery'"):
        sources({}, ["mystery"])


# -- the refit ------------------------------------------------------------------------


class FakeTensorRT:
    """TensorRT's Python API as the refit uses it, recording what it is given."""

    class DataType:
        FLOAT = types.SimpleNamespace(name="FLOAT")
        HALF = types.SimpleNamespace(name="HALF")

    class TensorLocation:
        HOST = "host"

    class SerializationFlag:
        EXCLUDE_WEIGHTS = "exclude"
        INCLUDE_REFIT = "include_refit"

    class Logger:
        WARNING = 2

        def __init__(self, level: int) -> None:
            pass

    def __init__(self, weights: dict[str, tuple[Any, int]], refit_ok: bool = True) -> None:
        self.declared = weights  # name -> (DataType, count)
        self.refit_ok = refit_ok
        self.set: dict[str, np.ndarray] = {}
        self.flags: list[str] = []
        fake = self

        class Weights:
            def __init__(self, dtype: Any, ptr: int, count: int) -> None:
                width, np_type = (4, np.float32) if dtype.name == "FLOAT" else (2, np.float16)
                raw = ctypes.string_at(ptr, count * width)  # what TensorRT reads
                self.value = np.frombuffer(raw, dtype=np_type).copy()

        class Engine:
            def create_serialization_config(self) -> Any:
                return types.SimpleNamespace(
                    clear_flag=lambda f: fake.flags.append(f"-{f}"),
                    set_flag=lambda f: fake.flags.append(f"+{f}"),
                )

            def serialize_with_config(self, config: Any) -> bytes:
                return b"refit:" + b",".join(sorted(k.encode() for k in fake.set))

        class Runtime:
            def __init__(self, logger: Any) -> None:
                pass

            def deserialize_cuda_engine(self, data: bytes) -> Any:
                return Engine() if data == b"engine" else None

        class Refitter:
            def __init__(self, engine: Any, logger: Any) -> None:
                pass

            def get_all_weights(self) -> list[str]:
                return list(fake.declared)

            def get_weights_prototype(self, name: str) -> Any:
                dtype, count = fake.declared[name]
                return types.SimpleNamespace(dtype=dtype, size=count)

            def set_named_weights(self, name: str, weights: Any, location: str) -> bool:
                fake.set[name] = weights.value
                return True

            def get_missing_weights(self) -> list[str]:
                return [n for n in fake.declared if n not in fake.set]

            def refit_cuda_engine(self) -> bool:
                return fake.refit_ok

        self.Weights = Weights
        self.Runtime = Runtime
        self.Refitter = Refitter


def test_every_weight_is_set_from_its_source_in_the_engines_own_dtype() -> None:
    trt = FakeTensorRT(
        {"conv KERNEL": (FakeTensorRT.DataType.HALF, 4), EPS: (FakeTensorRT.DataType.FLOAT, 3)}
    )
    weights = {"conv1.weight": torch.arange(4, dtype=torch.float32).reshape(2, 2)}
    done = engine_refit.refit(
        trt,
        b"engine",
        {"conv KERNEL": ["conv1.weight", np.float32], EPS: ["", np.float32]},
        weights,
        {"_native_batch_norm_legit_no_training_3": 1e-3},
    )
    assert trt.set["conv KERNEL"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert trt.set["conv KERNEL"].dtype == np.float16
    assert trt.set[EPS].tolist() == pytest.approx([1e-3] * 3)  # one eps for every channel
    assert done.engine == b"refit:" + b",".join(sorted([b"conv KERNEL", EPS.encode()]))
    assert done.taken == {"conv1.weight"} and done.constants == 1
    # serialized as Torch-TensorRT serializes a refit engine: with its weights, refittable
    assert trt.flags == ["-exclude", "+include_refit"]


def test_a_weight_of_another_size_or_a_failed_refit_is_not_refit_directly() -> None:
    trt = FakeTensorRT({"conv KERNEL": (FakeTensorRT.DataType.FLOAT, 5)})
    weights = {"conv1.weight": torch.zeros(4)}
    wmap = {"conv KERNEL": ["conv1.weight", np.float32]}
    with pytest.raises(NotDirect, match="takes 5 values, its source has 4"):
        engine_refit.refit(trt, b"engine", wmap, weights, {})
    trt = FakeTensorRT({"conv KERNEL": (FakeTensorRT.DataType.FLOAT, 4)}, refit_ok=False)
    with pytest.raises(NotDirect, match="refit_cuda_engine failed"):
        engine_refit.refit(trt, b"engine", wmap, weights, {})
    with pytest.raises(NotDirect, match="cannot deserialize"):
        engine_refit.refit(trt, b"not an engine", wmap, weights, {})
