"""Every Torch-TensorRT compile kiln makes goes through one library
(kiln.actions.tensorrt.compiler): trt_engine and aoti_package(backend = "tensorrt") pass the
same settings the same way.

- Torch-TensorRT's engine cache is passed off on both paths: kiln's keys decide reuse,
  and that cache keys an engine on the sequence of op names only, so two models with
  the same ops in the same order would share one engine.
- One policy for which settings the installed version accepts: a setting the compile
  function does not name as a parameter is left out, even though it takes **kwargs
  (2.13 raises on the names it removed).

Run against the recording stand-in for torch_tensorrt (trt_standin.StandIn): TensorRT
cannot be installed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kiln.action_specs import ExportSpec
from kiln.actions import torch_export
from kiln.actions.tensorrt import aoti_package
from kiln.actions.tensorrt.settings import ENGINE_CACHE_OFF
from kiln.package_specs import TrtPackageSpec
from test_aoti_trt_refit_contract_standin import OUT, _analyze, _on_cpu
from test_trt_contract_standin import run_engine_action
from trt_fixtures import written
from trt_manifests import record
from trt_standin import StandIn
from trt_tiny import model_execroot

pytestmark = pytest.mark.torch


@pytest.fixture
def execroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with model_execroot(tmp_path, monkeypatch, "trt_contract_tiny") as root:
        yield root


@pytest.fixture
def refit_execroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with model_execroot(tmp_path, monkeypatch, "trt_refit_tiny") as root:
        yield root


def _aoti_package_compile(
    monkeypatch: pytest.MonkeyPatch, standin: StandIn, attrs: dict[str, Any]
) -> dict[str, Any]:
    """The keyword arguments aoti_package(backend = "tensorrt", refit = False) compiles with."""
    monkeypatch.setattr(aoti_package, "pin_temp_dirs", lambda: None)
    for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(variable, "unset")
    actions = _analyze({"refit": False, **attrs})
    torch_export.main(record(_on_cpu(written(actions, f"{OUT}.export.json")), ExportSpec))
    standin.install(monkeypatch)
    aoti_package.main(record(_on_cpu(written(actions, f"{OUT}.package.json")), TrtPackageSpec))
    assert standin.names() == ["Input", "compile", "save"]
    return standin.call("compile").kwargs


def _trt_engine_compile(monkeypatch: pytest.MonkeyPatch, standin: StandIn) -> dict[str, Any]:
    """The keyword arguments trt_engine(platform = "linux_x86_64") compiles with."""
    run_engine_action(
        monkeypatch,
        standin,
        {"name": "tiny_trt", "platform": "linux_x86_64", "refit": False},
        windows_rule=False,
    )
    return standin.call("compile").kwargs


def test_contract_with_standin_aoti_package_compiles_with_the_engine_cache_off(
    refit_execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kwargs = _aoti_package_compile(monkeypatch, StandIn(save_error=None), {})
    assert {k: kwargs[k] for k in ENGINE_CACHE_OFF} == {
        "cache_built_engines": False,
        "reuse_cached_engines": False,
    }
    assert kwargs["min_block_size"] == 1  # the target's settings, passed as trt_engine's are
    assert Path(kwargs["timing_cache_path"]).name == "timing.cache"


def test_contract_with_standin_trt_engine_compiles_with_the_engine_cache_off(
    execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kwargs = _trt_engine_compile(monkeypatch, StandIn(save_error=None))
    assert {k: kwargs[k] for k in ENGINE_CACHE_OFF} == {
        "cache_built_engines": False,
        "reuse_cached_engines": False,
    }


def test_contract_with_standin_a_setting_the_version_lacks_is_left_out_on_the_aoti_path(
    refit_execroot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2.13 has no use_explicit_typing and takes **kwargs: passing it there is an error, so
    it is left out, by the same rule trt_engine follows for any setting."""
    standin = StandIn(save_error=None, missing=("optimization_level",))
    kwargs = _aoti_package_compile(
        monkeypatch, standin, {"optimization_level": 3, "use_explicit_typing": True}
    )
    assert "use_explicit_typing" not in kwargs  # the stand-in never names it
    assert "optimization_level" not in kwargs  # this "version" lacks it
