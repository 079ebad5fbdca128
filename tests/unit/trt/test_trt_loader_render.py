"""The raw-engine loader TrtLoader renders from a manifest: text on the CPU, and C++ syntax.

The text tests need nothing. The C++ tests run g++ -fsyntax-only on the rendered
sources: once against stand-in declarations of the TensorRT and CUDA APIs
(standin_include/, a contract test: it proves the code is valid C++ against the
API as kiln believes it to be), and once against the real headers, which only
run where TENSORRT_INCLUDE_DIR names a folder holding NvInferRuntime.h (and CUDA's
cuda_runtime_api.h is found: CUDA_INCLUDE_DIR, /usr/local/cuda/include, or the
nvidia-* wheels). Neither the TensorRT nor the TensorRT-RTX wheels ship headers.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kiln.action_specs import TrtLoaderSpec
from kiln.actions.spec import ActionFailure
from kiln.actions.tensorrt import render_loader as render_trt_loader
from kiln.actions.tensorrt.render_loader import class_name, render
from trt_manifests import detector_linux_rtx, record, resnet_win

STANDIN_INCLUDE = Path(__file__).resolve().parent / "standin_include"


def test_class_and_files_are_named_after_the_target() -> None:
    assert class_name("resnet_win") == "ResnetWin"
    assert class_name("mlp_trt") == "MlpTrt"
    assert class_name("3d-unet.trt") == "Model3dUnetTrt"
    files = render(record(resnet_win()))
    assert sorted(files) == [
        "CMakeLists.txt",
        "load_resnet_win.py",
        "resnet_win_trt.cpp",
        "resnet_win_trt.h",
        "resnet_win_trt_run.cpp",
    ]
    assert "\nclass ResnetWin {\n" in files["resnet_win_trt.h"]
    assert '#include "resnet_win_trt.h"' in files["resnet_win_trt.cpp"]


def test_bindings_dtypes_and_ranges_come_from_the_manifest() -> None:
    header = render(record(detector_linux_rtx()))["detector_trt_trt.h"]
    assert "static constexpr std::size_t kNumInputs = 2;" in header
    assert "static constexpr std::size_t kNumOutputs = 2;" in header
    assert "static constexpr std::size_t kMaxRank = 4;" in header
    assert (
        '      {"image", nvinfer1::DataType::kHALF, "float16", 4,\n'
        "       {1, 3, 32, 48}, {4, 3, 64, 48}, {8, 3, 512, 48}},\n"
    ) in header
    assert (
        '      {"class", nvinfer1::DataType::kINT64, "int64", 2,\n       {1, 7}, {4, 7}, {8, 7}},\n'
    ) in header
    # an output whose shape is data-dependent: -1, read from the context at run time
    assert (
        '{"output1", nvinfer1::DataType::kINT64, "int64", 1,\n       {-1}, {-1}, {-1}},' in header
    )
    assert 'kTensorRT = "TensorRT-RTX 1.4.0.76";' in header
    assert 'kBuildComputeCapability = "9.0";' in header
    assert "kHardwareCompatible = false;" in header
    assert "kVersionCompatible = false;" in header
    assert """e.g.\n// "DetectorTrt: input 'image' dim 0 is 9, outside [1, 8]".""" in header
    assert "model.set_input_shapes({{4, 3, 64, 48}, {4, 7}});" in header


def test_runtime_api_calls_and_shape_checks() -> None:
    files = render(record(detector_linux_rtx()))
    source = files["detector_trt_trt.cpp"]
    for call in (
        "nvinfer1::createInferRuntime(logger)",
        "->deserializeCudaEngine(blob.data(), blob.size())",
        "->getTensorIOMode(name.c_str())",
        "->getTensorDataType(name.c_str())",
        "->createExecutionContext()",
        "->setInputShape(name.c_str(), dims)",
        "->getTensorShape(name.c_str())",
        "->setTensorAddress(name.c_str(), outputs[i])",
        "->enqueueV3(stream)",
    ):
        assert call in source, call
    assert '" input shapes (image, class), got "' in source
    assert '", outside ["' in source
    assert "throw std::invalid_argument" in source
    # version-compatible engines carry their lean runtime: host code must be allowed
    assert "setEngineHostCodeAllowed" not in source
    assert "setEngineHostCodeAllowed(true)" in render(record(resnet_win()))["resnet_win_trt.cpp"]


def test_cmake_builds_with_msvc_for_windows_and_gxx_for_linux() -> None:
    windows = render(record(resnet_win()))["CMakeLists.txt"]
    assert "if(NOT WIN32 OR NOT MSVC)" in windows
    assert "/W4 /permissive- /EHsc /Zc:__cplusplus" in windows
    assert '-G "Visual Studio 17 2022" -A x64' in windows
    assert "find_library(TENSORRT_LIBRARY NAMES nvinfer_11 nvinfer" in windows
    assert "-Wall" not in windows
    assert "..\\resnet_win.engines\\resnet_win.engine" in windows

    linux = render(record(detector_linux_rtx()))["CMakeLists.txt"]
    assert 'CMAKE_CXX_COMPILER_ID STREQUAL "GNU"' in linux
    assert "-Wall -Wextra" in linux
    assert "MSVC" not in linux
    # the RTX wheel ships libtensorrt_rtx.so.1 only
    assert "find_library(TENSORRT_LIBRARY NAMES tensorrt_rtx libtensorrt_rtx.so.1" in linux
    for text in (windows, linux):
        assert "find_package(CUDAToolkit REQUIRED)" in text
        assert "CUDA::cudart" in text
        assert "set(CMAKE_CXX_STANDARD 17)" in text


def test_python_example_loads_the_ep_the_way_it_was_saved() -> None:
    coded = render(record(resnet_win()))["load_resnet_win.py"]
    assert (
        "return torch_tensorrt.load_cross_compiled_exported_program(str(PROGRAM)).module()" in coded
    )
    assert 'PROGRAM = Path(__file__).resolve().parent / "../resnet_win.ep"' in coded
    assert 'platform.system() != "Windows"' in coded
    documented = render(record(detector_linux_rtx()))["load_detector_trt.py"]
    assert "return torch_tensorrt.load(str(PROGRAM)).module()" in documented
    assert 'platform.system() != "Linux"' in documented
    for text in (coded, documented):
        tree = ast.parse(text)  # valid Python
        assert ast.get_docstring(tree)


def test_no_cc_loader_renders_only_the_python_example() -> None:
    manifest = resnet_win()
    manifest["raw_engine"] = {"deployable": False, "problems": ["2 TensorRT engines (...)"]}
    assert sorted(render(record(manifest), cc_loader=False)) == ["load_resnet_win.py"]
    with pytest.raises(ActionFailure, match=r"^no raw-engine C\+\+ loader for //models:resnet_win"):
        render(record(manifest))


def test_action_writes_the_folder(tmp_path: Path) -> None:

    manifest = tmp_path / "resnet_win.manifest.json"
    manifest.write_text(record(resnet_win()).to_json())
    out = tmp_path / "resnet_win_loader"
    render_trt_loader.main(
        TrtLoaderSpec(
            label="//models:resnet_win",
            name="resnet_win",
            manifest=str(manifest),
            output=str(out),
            cc_loader=True,
        )
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(render(record(resnet_win())))


# -- C++ syntax ------------------------------------------------------------------------------


def _syntax_check(folder: Path, includes: list[Path], *, std: str = "c++17") -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ on this machine")
    for source in sorted(folder.glob("*.cpp")):
        run = subprocess.run(
            [gxx, f"-std={std}", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{folder}"]
            + [f"-isystem{i}" for i in includes]
            + [str(source)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, f"{source.name}:\n{run.stderr}"


def _write(files: dict[str, str], folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("manifest", [resnet_win(), detector_linux_rtx()], ids=lambda m: m["name"])
def test_contract_with_standin_headers_loader_is_valid_cxx(
    manifest: dict[str, Any], tmp_path: Path
) -> None:
    """Contract test with stand-in headers (standin_include/: the TensorRT 10 runtime API and
    the CUDA runtime API as kiln uses them, declarations only): the generated loader and
    runner are valid C++17, warning-free with -Wall -Wextra."""
    folder = _write(render(record(manifest)), tmp_path / "loader")
    _syntax_check(folder, [STANDIN_INCLUDE])


def _cuda_include() -> Path | None:
    candidates = [os.environ.get("CUDA_INCLUDE_DIR", ""), "/usr/local/cuda/include"]
    for entry in sys.path:  # the nvidia-*-cu12 / cu13 wheels torch depends on
        nvidia = Path(entry or ".") / "nvidia"
        if nvidia.is_dir():
            candidates += [str(p.parent) for p in nvidia.glob("*/include/cuda_runtime_api.h")]
    for candidate in candidates:
        if candidate and (Path(candidate) / "cuda_runtime_api.h").is_file():
            return Path(candidate)
    return None


@pytest.mark.parametrize("manifest", [resnet_win(), detector_linux_rtx()], ids=lambda m: m["name"])
def test_loader_compiles_against_real_tensorrt_headers(
    manifest: dict[str, Any], tmp_path: Path
) -> None:
    """g++ -fsyntax-only of the loader against TensorRT's own headers (TENSORRT_INCLUDE_DIR)."""
    include = os.environ.get("TENSORRT_INCLUDE_DIR")
    if not include:
        pytest.skip(
            "TENSORRT_INCLUDE_DIR is not set: no TensorRT headers here (neither the TensorRT "
            "nor the TensorRT-RTX wheels ship them); set it to a folder holding NvInferRuntime.h"
        )
    if not (Path(include) / "NvInferRuntime.h").is_file():
        pytest.skip(f"TENSORRT_INCLUDE_DIR={include} holds no NvInferRuntime.h")
    version = Path(include) / "NvInferVersion.h"
    headers = "rtx" if version.is_file() and "RTX" in version.read_text() else "standard"
    if headers != manifest["toolchain"]["flavour"]:
        pytest.skip(f"the headers are {headers} TensorRT's; this engine's loader is for the other")
    cuda = _cuda_include()
    if cuda is None:
        pytest.skip(
            "no cuda_runtime_api.h (set CUDA_INCLUDE_DIR, or install the CUDA toolkit or the "
            "nvidia-cuda-runtime wheel): TensorRT's headers include it"
        )
    folder = _write(render(record(manifest)), tmp_path / "loader")
    _syntax_check(folder, [Path(include), cuda])
