"""aoti_package(target_platform = "windows_x86_64"): built on Linux, validated under Wine.

One workspace and disk cache for the module. The mlp (models/) and a small CNN
(tests/models/small_cnn.py) are exported, cross-compiled with MinGW against PyPI's
Windows torch, joined and run under wine64 against eager at min/opt/max; then the
mlp's weights alone change (the compile is a cache hit); a package whose exported
program is not its eager self (tests/models/wrong.py) fails the Wine validation; a
model whose vectorised kernels need Sleef fails the compile naming the op; CUDA is
refused at analysis. Needs tools/windows_toolchain.sh install (and the network once
per disk cache for the 122 MB wheel).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kiln_workspace import BuildResult, ModelWorkspace, model_workspace

_MISSING = shutil.which("x86_64-w64-mingw32-g++") is None or not (
    shutil.which("wine64") or Path("/usr/lib/wine/wine64").exists()
)
pytestmark = [
    pytest.mark.torch,
    # CI (.ci/run: KILN_REQUIRE_WINDOWS) installs them (tools/test), so never skips.
    pytest.mark.skipif(
        _MISSING and not os.environ.get("KILN_REQUIRE_WINDOWS"),
        reason="MinGW-w64 and wine64 missing: tools/windows_toolchain.sh install",
    ),
]

REPO = Path(__file__).resolve().parents[2]
WINDOWS_SHA256 = "a0d8b11f16a48d60e2015d8213aa0390744cbebb98e58b62b3514dddc656e330"
MODELS = REPO / "models"
TESTS_MODELS = REPO / "tests" / "models"

BUILD = """
torch_model(
    name = "mlp",
    src = "mlp.py",
    factory = "mlp:build",
    weights = "{weights}",
    inputs = [{{"name": "x", "shape": [8, 10], "dtype": "float32"}}],
    dynamic_dims = [{{"name": "batch", "min": 1, "max": 64, "axes": {{"x": 0}}}}],
)

aoti_package(name = "mlp_win", model = ":mlp", target_platform = "windows_x86_64")

torch_model(
    name = "cnn",
    src = "small_cnn.py",
    factory = "small_cnn:build",
    inputs = [{{"name": "image", "shape": [2, 3, 16, 16], "dtype": "float32"}}],
    dynamic_dims = [{{"name": "batch", "min": 1, "max": 4, "axes": {{"image": 0}}}}],
)

aoti_package(name = "cnn_win", model = ":cnn", target_platform = "windows_x86_64")

torch_model(
    name = "mlp_zeroed",
    src = "wrong.py",
    deps = ["mlp.py"],
    factory = "wrong:build",
    factory_kwargs = {{"model": "mlp", "how": "zeroed"}},
    inputs = [{{"name": "x", "shape": [8, 10], "dtype": "float32"}}],
    dynamic_dims = [{{"name": "batch", "min": 1, "max": 64, "axes": {{"x": 0}}}}],
)

aoti_package(name = "mlp_zeroed_win", model = ":mlp_zeroed", target_platform = "windows_x86_64")

torch_model(
    name = "cnn_tanh",
    src = "small_cnn.py",
    factory = "small_cnn:build",
    factory_kwargs = {{"tail": "tanh"}},
    inputs = [{{"name": "image", "shape": [2, 3, 16, 16], "dtype": "float32"}}],
)

aoti_package(name = "cnn_tanh_win", model = ":cnn_tanh", target_platform = "windows_x86_64")

aoti_package(
    name = "mlp_cuda_win",
    model = ":mlp",
    target_platform = "windows_x86_64",
    device = "cuda",
)
"""

RETRAIN = """
import torch
from safetensors.torch import save_file
import mlp

torch.manual_seed(7)
save_file({k: torch.randn_like(v) for k, v in mlp.build().state_dict().items()}, "b.safetensors")
"""


@dataclass(frozen=True)
class Built:
    workspace: ModelWorkspace
    first: BuildResult
    retrained: BuildResult


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    base = tmp_path_factory.mktemp("windows")
    sources = [
        MODELS / "mlp.py",
        MODELS / "mlp.safetensors",
        TESTS_MODELS / "small_cnn.py",
        TESTS_MODELS / "wrong.py",
    ]
    workspace = model_workspace(
        base / "ws", base / "cache", BUILD.format(weights="mlp.safetensors"), sources
    )
    first = workspace.build("//models:mlp_win", "//models:cnn_win")
    assert first.code == 0, first.err
    subprocess.run([sys.executable, "-c", RETRAIN], cwd=workspace.root / "models", check=True)
    (workspace.root / "models/BUILD").write_text(BUILD.format(weights="b.safetensors"))
    retrained = workspace.build("//models:mlp_win", "--explain")
    assert retrained.code == 0, retrained.err
    yield Built(workspace, first, retrained)


def _report(built: Built, name: str) -> dict[str, object]:
    path = built.workspace.root / "kiln-out/models" / f"{name}.validation.json"
    loaded: dict[str, object] = json.loads(path.read_text())
    return loaded


def test_mlp_and_cnn_packages_run_under_wine_as_eager_does(built: Built) -> None:
    assert built.first.actions("AotiCompile") == ["executed", "executed"]
    assert built.first.actions("AotiValidate") == ["executed", "executed"]
    for name in ("mlp_win", "cnn_win"):
        report = _report(built, name)
        points = [check["point"] for check in report["checks"]]  # type: ignore[attr-defined]
        assert points == ["min", "opt", "max"], report
        assert float(report["max_abs_error"]) < 1e-4, report  # type: ignore[arg-type]


def test_the_package_is_a_windows_dll_with_windows_provenance(built: Built) -> None:
    import zipfile

    package = built.workspace.root / "kiln-out/models/mlp_win.pt2"
    with zipfile.ZipFile(package) as archive:
        (library,) = [n for n in archive.namelist() if n.endswith(".wrapper.so")]
        assert archive.read(library)[:2] == b"MZ"  # a PE image, not an ELF one
        text = b"".join(archive.read(n) for n in archive.namelist())
    assert b"windows_x86_64" in text
    # No path of this machine: the compile command inductor writes into the sources names
    # the Windows libraries at the sandbox's fixed /tmp/kiln-torch-tmp, never the disk
    # cache's or the workspace's path.
    assert str(built.workspace.root).encode() not in text
    assert str(built.workspace.root.parent / "cache").encode() not in text
    assert b"-L/tmp/kiln-torch-tmp/windows-torch/" + WINDOWS_SHA256.encode() in text


def test_new_weights_rerun_the_join_and_validation_never_the_compile(built: Built) -> None:
    run = built.retrained
    assert run.actions("AotiCompile") == ["cached"]
    assert run.actions("AotiJoin") == ["executed"]
    assert run.actions("AotiValidate") == ["executed"]
    assert "EXPLAIN: AotiCompile" not in run.err


def test_a_wrong_package_fails_the_wine_validation(built: Built) -> None:
    run = built.workspace.build("//models:mlp_zeroed_win")
    assert run.code == 1
    assert run.actions("AotiValidate") == ["failed"]
    assert "the package's output differs from eager at the min shapes (x: [1, 10]) under Wine" in (
        run.err
    )


def test_an_op_that_needs_sleef_fails_the_compile_naming_it(built: Built) -> None:
    run = built.workspace.build("//models:cnn_tanh_win")
    assert run.code == 1
    assert "the model's 'tanh' needs Sleef's vectorised tanh" in run.err
    assert "use cpu_target = 'x86-64' for this target" in run.err


def test_cuda_for_windows_is_refused_at_analysis(built: Built) -> None:
    run = built.workspace.build("//models:mlp_cuda_win")
    assert run.code == 1
    assert "target_platform = 'windows_x86_64' builds CPU packages only" in run.err
    assert run.actions("TorchExport") == []


def test_the_loader_built_with_mingw_refuses_a_wrong_shape_under_wine(
    built: Built, tmp_path: Path
) -> None:
    """The generated loader library (what an MSVC application builds) and its runner,
    compiled here with MinGW: a batch past the dynamic dim's max, and a wrong width,
    are refused before the model runs; a right shape runs."""
    loader = built.workspace.root / "kiln-out/models/mlp_win_windows_loader"
    assert sorted(p.name for p in loader.iterdir()) == [
        "CMakeLists.txt",
        "mlp_win_loader.c",
        "mlp_win_loader.h",
        "mlp_win_loader_run.c",
    ]
    subprocess.run(
        ["x86_64-w64-mingw32-gcc", "-O2", "-Wall", "-Werror", "-o", str(tmp_path / "run.exe"),
         str(loader / "mlp_win_loader_run.c"), str(loader / "mlp_win_loader.c")],
        check=True,
    )  # fmt: skip
    # kiln unpacked them (windows-libs), not an action (windows-torch: the sandbox shows
    # kiln's folder there, read-only)
    assert not list((built.workspace.root.parent / "cache").glob("**/windows-torch/*"))
    (lib,) = (built.workspace.root.parent / "cache").glob("**/windows-libs/*/torch/lib")
    for dll in lib.glob("*.dll"):
        (tmp_path / dll.name).symlink_to(dll)
    shutil.copy(built.workspace.root / "kiln-out/models/mlp_win.pt2", tmp_path / "mlp_win.pt2")
    (tmp_path / "input.bin").write_bytes(bytes(4 * 80 * 11))
    wine = shutil.which("wine64") or "/usr/lib/wine/wine64"
    env = {
        **dict(built.workspace.env),
        "WINEPREFIX": str(tmp_path / "prefix"),
        "WINEDEBUG": "-all",
        "KMP_AFFINITY": "disabled",
    }

    def run(*shape: int) -> subprocess.CompletedProcess[str]:
        argv = [wine, "run.exe", "mlp_win.pt2", "input.bin", "output.bin", *map(str, shape)]
        return subprocess.run(
            argv, check=False, cwd=tmp_path, env=env, capture_output=True, text=True
        )

    too_big = run(80, 10)
    assert too_big.returncode == 2
    assert "x: dimension 0 is 80, expected 1..64" in too_big.stderr
    too_wide = run(8, 11)
    assert too_wide.returncode == 2
    assert "x: dimension 1 is 11, expected 10..10" in too_wide.stderr
    right = run(8, 10)
    assert right.returncode == 0, right.stderr
    assert "ok: 32 output values" in right.stdout
