"""Batch norms' eps go into an engine's weight map before Torch-TensorRT's fast refit
(kiln.actions.tensorrt.refit_constants). With TensorRT-RTX each eps is a refittable
constant the compile-time map leaves out (pytorch/TensorRT#3752): without it the fast
refit fails and the slow one re-interprets the graph (ResNet-18's AotiRefit: 15.8 s on
the H100, as slow as in a full build). The graphs are real torch.export graphs; the
engine and Torch-TensorRT's refit step are fakes (no TensorRT here)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from kiln.actions.tensorrt.refit_constants import add_eps_constants, eps_in_weight_maps

pytestmark = pytest.mark.torch

EPS = "bn/_native_batch_norm_legit_no_training_eps CONSTANT"


def _graph(eps: float) -> Any:
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4, eps=eps)).eval()
    program = torch.export.export(model, (torch.randn(1, 3, 8, 8),))
    # ATen-level, as Torch-TensorRT lowers it: batch_norm -> _native_batch_norm_legit_no_training
    return program.run_decompositions({}).graph_module.graph


def _weights(*names: str) -> dict[str, tuple[Any, int]]:
    return {name: (np.dtype(np.float32), 1) for name in names}


def test_each_batch_norms_eps_missing_from_the_map_is_added_from_its_node() -> None:
    weight_name_map: dict[str, Any] = {"0/conv2d KERNEL": ["0.weight", np.float32]}
    engine = _weights("0/conv2d KERNEL", EPS, "other/add_rhs CONSTANT")
    added = add_eps_constants(weight_name_map, engine, _graph(eps=1e-3))
    assert added == [EPS]
    (value,) = weight_name_map["constant_mapping"].values()
    assert value.dtype == np.float32 and value.tolist() == [pytest.approx(1e-3)]
    # what is not an eps stays missing: the slow refit finds it, as before
    assert "other/add_rhs CONSTANT" not in weight_name_map["constant_mapping"]
    assert weight_name_map["0/conv2d KERNEL"] == ["0.weight", np.float32]


def test_an_eps_the_map_lists_without_a_state_dict_name_is_moved_to_its_constants() -> None:
    """Torch-TensorRT keeps a constant it could not find in the state dict as
    ["", dtype] and then skips it: the refit misses it just the same."""
    weight_name_map: dict[str, Any] = {EPS: ["", np.float16]}
    engine = {EPS: (np.dtype(np.float32), 4)}  # a (1, 4, 1, 1) constant
    assert add_eps_constants(weight_name_map, engine, _graph(eps=1e-5)) == [EPS]
    assert EPS not in weight_name_map
    value = weight_name_map["constant_mapping"][EPS]
    assert value.dtype == np.float16 and value.shape == (4,)


def test_a_constant_the_map_has_and_an_eps_of_no_node_here_are_left_alone() -> None:
    kept = np.array([5.0], dtype=np.float32)
    weight_name_map: dict[str, Any] = {"constant_mapping": {EPS: kept}}
    unknown = "bn/_native_batch_norm_legit_no_training_7_eps CONSTANT"
    assert add_eps_constants(weight_name_map, _weights(EPS, unknown), _graph(eps=1e-5)) == []
    assert weight_name_map["constant_mapping"] == {EPS: kept}


class _Refitter:
    def __init__(self, engine: Any, logger: Any) -> None:
        self.engine = engine

    def get_all_weights(self) -> list[str]:
        return list(self.engine)


def test_the_refit_step_gets_the_completed_map_and_is_restored_after() -> None:
    seen: list[dict[str, Any]] = []

    def step(new_gm: Any, old_engine: Any, input_list: Any, settings: Any, weight_name_map: Any):
        seen.append(dict(weight_name_map or {}))

    steps = SimpleNamespace(
        _refit_single_trt_engine_with_gm=step,
        trt=SimpleNamespace(Refitter=_Refitter, nptype=None),
        TRT_LOGGER=None,
    )
    gm = SimpleNamespace(graph=_graph(eps=2e-5))
    with eps_in_weight_maps(steps):
        steps._refit_single_trt_engine_with_gm(
            new_gm=gm, old_engine=[EPS], input_list=[], settings=None, weight_name_map={"a": 1}
        )
        # the slow refit, after a fast one failed anyway: no map, nothing added
        steps._refit_single_trt_engine_with_gm(gm, [EPS], [], settings=None, weight_name_map=None)
    assert steps._refit_single_trt_engine_with_gm is step
    assert list(seen[0]["constant_mapping"]) == [EPS]
    assert seen[1] == {}


def test_a_failure_to_read_the_engine_leaves_the_map_to_the_slow_refit() -> None:
    seen: list[Any] = []

    def broken(engine: Any, logger: Any) -> Any:
        raise RuntimeError("no refitter for this engine")

    steps = SimpleNamespace(
        _refit_single_trt_engine_with_gm=lambda **kwargs: seen.append(kwargs["weight_name_map"]),
        trt=SimpleNamespace(Refitter=broken),
        TRT_LOGGER=None,
    )
    with eps_in_weight_maps(steps):
        steps._refit_single_trt_engine_with_gm(
            new_gm=SimpleNamespace(graph=_graph(eps=1e-5)),
            old_engine=[EPS],
            weight_name_map={"a": 1},
        )
    assert seen == [{"a": 1}]
    with eps_in_weight_maps(None):  # a Torch-TensorRT without the module: nothing to wrap
        pass
