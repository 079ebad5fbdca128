"""The TensorRT toolchain probe: what it finds, how it is cached and faked, what preflight says."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from kiln.rules.tensorrt import trt_toolchain as trt_probe
from kiln.rules.tensorrt.trt_toolchain import FAKE_ENV, Probe, preflight, probe, run_probe
from trt_fixtures import CPU_ONLY, GPU_RTX, GPU_STANDARD, probe_file

from tests.kiln_workspace import MakeWorkspace

ACTION_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _fake_python(tmp_path: Path, body: str) -> str:
    """An executable that stands for an interpreter: it ignores `-c CODE` and runs `body`."""
    path = tmp_path / "fake-python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.slow
def test_real_probe_of_this_machine_finds_cpu_torch_and_no_torch_tensorrt() -> None:
    found = run_probe(sys.executable, dict(ACTION_ENV))
    assert found.probe_error is None
    assert found.torch is not None and found.torch.startswith("2.")
    assert found.os == "linux"
    if found.torch_tensorrt is None:  # this workplace's machines: no TensorRT can be installed
        assert found.torch_tensorrt_error is not None
        assert "torch_tensorrt" in found.torch_tensorrt_error
        failed = preflight(found, "linux_x86_64")
        assert failed is not None
        assert any(p.startswith("torch_tensorrt is not importable") for p in failed.problems)


def test_output_before_the_marker_is_ignored(tmp_path: Path) -> None:
    line = trt_probe.MARKER + json.dumps(GPU_STANDARD.to_json())
    python = _fake_python(tmp_path, f"echo 'import error when try...'; printf '%s\\n' '{line}'")
    assert run_probe(python, {}) == GPU_STANDARD


def test_a_crashing_probe_is_an_error_and_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _fake_python(tmp_path, "echo 'Segmentation fault' >&2; exit 139")
    found = probe(python, {})
    assert found.probe_error == f"the probe of {python} exited with code 139: Segmentation fault"
    failed = preflight(found, "linux_x86_64")
    assert failed is not None
    assert failed.message == (
        f"cannot build a TensorRT engine for linux_x86_64 here: the probe of {python} exited "
        "with code 139: Segmentation fault"
    )
    calls = []
    monkeypatch.setattr(trt_probe, "run_probe", lambda p, e: calls.append(p) or GPU_STANDARD)
    assert probe(python, {}) == GPU_STANDARD  # ran again: the crash was not cached
    assert calls == [python]


def test_probe_is_cached_per_interpreter_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def fake_run(python: str, env: dict[str, str]) -> Probe:
        calls.append(python)
        return GPU_RTX

    monkeypatch.setattr(trt_probe, "run_probe", fake_run)
    first = probe("/usr/bin/python3", ACTION_ENV)
    again = probe("/usr/bin/python3", ACTION_ENV)
    assert first == again == GPU_RTX
    assert (first.source, again.source) == ("probe", "cache")
    assert calls == ["/usr/bin/python3"]
    probe("/usr/bin/python3", {**ACTION_ENV, "PYTHONPATH": "/tmp/site"})
    probe("/opt/other/python3", ACTION_ENV)
    assert len(calls) == 3
    cached = list((Path(os.environ["XDG_CACHE_HOME"]) / "kiln" / "probes").iterdir())
    assert len(cached) == 3


def test_a_damaged_cache_entry_probes_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trt_probe, "run_probe", lambda p, e: GPU_RTX)
    probe("/usr/bin/python3", ACTION_ENV)
    (entry,) = (Path(os.environ["XDG_CACHE_HOME"]) / "kiln" / "probes").iterdir()
    text = entry.read_text()
    for cut in (0, 1, len(text) // 2, len(text) - 1):  # every kind of truncation
        entry.chmod(0o644)
        entry.write_text(text[:cut])
        assert probe("/usr/bin/python3", ACTION_ENV) == GPU_RTX


def test_fake_probe_from_a_json_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = probe_file(tmp_path, GPU_RTX)
    monkeypatch.setenv(FAKE_ENV, path)
    monkeypatch.setattr(trt_probe, "run_probe", lambda p, e: pytest.fail("the fake must be used"))
    found = probe("/usr/bin/python3", ACTION_ENV)
    assert found == GPU_RTX
    assert found.source == f"fake:{path}"


# -- preflight -------------------------------------------------------------------------------

WINDOWS_HINT = (
    "pip install torch-tensorrt==2.13.0 (kiln's 'trt' extra) on a Linux x86-64 machine with a "
    "CUDA GPU and a CUDA build of torch 2.13 (torch-tensorrt pins torch exactly); "
    "cross-compiling for Windows needs the standard TensorRT, whose Linux libraries ship the "
    "Windows builder resource: the TensorRT-RTX flavour (torch-tensorrt-rtx) cannot "
    "cross-compile for Windows"
)


def test_preflight_passes_where_everything_is_there() -> None:
    assert preflight(GPU_STANDARD, "linux_x86_64") is None
    assert preflight(GPU_STANDARD, "windows_x86_64") is None
    assert preflight(GPU_RTX, "linux_x86_64") is None


def test_preflight_on_a_cpu_machine_names_both_missing_pieces() -> None:
    failed = preflight(CPU_ONLY, "windows_x86_64")
    assert failed is not None
    assert failed.problems == (
        "no CUDA GPU (torch 2.13.0+cpu is a CPU-only build)",
        "torch_tensorrt is not importable (ModuleNotFoundError: No module named 'torch_tensorrt')",
    )
    assert failed.hint == WINDOWS_HINT
    linux = preflight(CPU_ONLY, "linux_x86_64")
    assert linux is not None
    assert linux.hint == (
        "pip install torch-tensorrt==2.13.0 (kiln's 'trt' extra) on a Linux x86-64 machine with "
        "a CUDA GPU and a CUDA build of torch 2.13 (torch-tensorrt pins torch exactly)"
    )


def test_preflight_for_windows_with_the_rtx_flavour() -> None:
    failed = preflight(GPU_RTX, "windows_x86_64")
    assert failed is not None
    assert failed.message == (
        "cannot build a TensorRT engine for windows_x86_64 here: "
        "torch_tensorrt.ENABLED_FEATURES.windows_cross_compile is False: TensorRT-RTX 1.4.0.76 "
        "has no Windows builder resource (libnvinfer_builder_resource_win.so)"
    )
    # torch 2.11 there: the hint names the torch-tensorrt that matches it
    assert failed.hint.startswith("pip install torch-tensorrt==2.11.0 on a Linux x86-64 machine")


def test_preflight_names_a_wrong_host_and_a_gpu_torch_cannot_see() -> None:
    mac = Probe(**{**GPU_STANDARD.__dict__, "os": "darwin", "arch": "arm64"})
    failed = preflight(mac, "linux_x86_64")
    assert failed is not None and failed.problems == ("the host is darwin arm64, not Linux x86-64",)
    hidden = Probe(**{**GPU_STANDARD.__dict__, "gpus": ()})
    failed = preflight(hidden, "linux_x86_64")
    assert failed is not None
    assert failed.problems == ("no CUDA GPU visible to torch 2.13.0+cu130 (CUDA 13.0)",)
    no_torch = Probe(os="linux", arch="x86_64", torch_error="ModuleNotFoundError: torch")
    failed = preflight(no_torch, "linux_x86_64")
    assert failed is not None
    assert failed.problems == ("torch is not importable (ModuleNotFoundError: torch)",)


def test_describe_lists_what_was_found() -> None:
    assert trt_probe.describe(GPU_RTX) == [
        ("python", "3.12.3 (/usr/bin/python3)"),
        ("host", "linux x86_64"),
        ("torch", "2.11.0+cu130 (CUDA 13.0)"),
        ("torch_tensorrt", "2.11.0 (TensorRT-RTX; distribution torch_tensorrt_rtx)"),
        ("tensorrt", "1.4.0.76"),
        ("windows_cross_compile", "no"),
        ("refit", "yes"),
        ("gpus", "0: NVIDIA H200 (compute capability 9.0, 143771 MB)"),
    ]


def test_info_toolchains_prints_the_probe_and_what_can_build(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ws = make_workspace({})
    path = probe_file(tmp_path, GPU_RTX)
    monkeypatch.setenv(FAKE_ENV, path)
    result = ws.kiln("info", "toolchains")
    assert result.code == 0, result.err
    assert result.out == (
        "python: 3.12.3 (/usr/bin/python3)\n"
        "host: linux x86_64\n"
        "torch: 2.11.0+cu130 (CUDA 13.0)\n"
        "torch_tensorrt: 2.11.0 (TensorRT-RTX; distribution torch_tensorrt_rtx)\n"
        "tensorrt: 1.4.0.76\n"
        "windows_cross_compile: no\n"
        "refit: yes\n"
        "gpus: 0: NVIDIA H200 (compute capability 9.0, 143771 MB)\n"
        "trt_engine linux_x86_64: can build\n"
        "trt_engine windows_x86_64: cannot build: "
        "torch_tensorrt.ENABLED_FEATURES.windows_cross_compile is False: TensorRT-RTX 1.4.0.76 "
        "has no Windows builder resource (libnvinfer_builder_resource_win.so)\n"
        f"probe: fake:{path}\n"
    )
    assert not (ws.root / "kiln-out").exists()  # nothing was built
