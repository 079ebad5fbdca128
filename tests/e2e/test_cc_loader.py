"""The C++ loader library kiln generates for every aoti_package.

The first tests render the templates only (no compiler). The others build the
workspace's own //models:mlp_pt2 with kiln, compile tests/cc/model_app.cpp
against its loader (class MlpPt2) and the libtorch inside the torch wheel, once
with plain g++ and once through the generated CMake package, run it on the
package and compare its output with Python's torch._inductor.aoti_load_package.
The weights tests swap other weights into the running model and load the
separate-form //models:mlp_sep_pt2 (class MlpSepPt2) with its weights file, against
eager torch. Each binary is compiled once per session (fixtures): about 5 s each on
two cores.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln.action_graph import File
from kiln.action_specs import ExportSpec
from kiln.rule_api import DynamicDim, TensorSpec
from kiln.rules.aoti.aoti_loader import (
    LoaderSource,
    class_name,
    declare_loader_library,
    render_loader,
)
from kiln.rules.aoti.aoti_package import RULE as AOTI_PACKAGE
from kiln.rules.aoti.aoti_package import AotiPackageAttrs
from kiln.rules.model.torch_model import TorchModelInfo

from tests.e2e.conftest import SESSION_ENV
from tests.e2e.cpu_claims import claim_beyond_this_cpu
from tests.model_fixtures import DETECTOR, model_info, rule_context

REPO = Path(__file__).resolve().parents[2]
APP_SOURCES = REPO / "tests" / "cc"
TARGET = "//models:mlp_pt2"
SEPARATE = "//models:mlp_sep_pt2"  # weights = "separate"
BATCH = 4
TOLERANCE = 1e-5


def _torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")  # without importing torch here
    assert spec is not None and spec.origin is not None, "torch is not installed"
    return Path(spec.origin).parent


TORCH = _torch_dir()
TORCH_CMAKE_PREFIX = TORCH / "share" / "cmake"  # torch.utils.cmake_prefix_path
GXX_COMPILE = [
    "g++",
    "-std=c++20",
    "-O1",
    "-D_GLIBCXX_USE_CXX11_ABI=1",
    "-Wall",
    "-Wextra",
    "-Werror",  # for the generated code and the app; torch's headers are system headers
    "-isystem",
    str(TORCH / "include"),
    "-isystem",
    str(TORCH / "include/torch/csrc/api/include"),
]
GXX_LINK = [f"-L{TORCH / 'lib'}", f"-Wl,-rpath,{TORCH / 'lib'}", "-ltorch", "-ltorch_cpu", "-lc10"]

REFERENCE = """
import sys
import torch
import torch._inductor

package = torch._inductor.aoti_load_package(sys.argv[1])
batch = int(sys.argv[2])
x = torch.arange(batch * 10, dtype=torch.float32).reshape(batch, 10).div(100)
with torch.no_grad():
    out = package(x)
for tensor in out if isinstance(out, (list, tuple)) else [out]:
    for value in tensor.double().flatten().tolist():
        print(repr(value))
"""


# -- the rendered text (no compiler) ---------------------------------------------------------

RESNET = model_info(
    "//models:resnet",
    "models/resnet.py",
    "resnet:build",
    (TensorSpec(name="image", shape=(2, 3, 224, 224), dtype="float32"),),
    (DynamicDim(name="batch", min=1, max=16, axes={"image": 0}),),
)

TWO_INPUTS = DETECTOR


def _render(
    model: TorchModelInfo, name: str, *, device: str = "cpu", backend: str = "inductor"
) -> dict[str, str]:
    return render_loader(
        LoaderSource(name, f"//models:{name}", model, device, backend, f"../{name}.pt2")
    )


def test_class_is_named_after_the_target() -> None:
    assert class_name("resnet_pt2") == "ResnetPt2"
    assert class_name("mlp_pt2") == "MlpPt2"
    assert class_name("mlp-v2.cpu") == "MlpV2Cpu"
    assert class_name("bertBase_pt2") == "BertBasePt2"
    assert class_name("3d_unet") == "Model3dUnet"
    files = _render(RESNET, "resnet_pt2")
    assert sorted(files) == [
        "resnet_pt2.BUILD.bazel",
        "resnet_pt2.cpp",
        "resnet_pt2.h",
        "resnet_pt2Config.cmake",
    ]
    assert "\nclass ResnetPt2 {\n" in files["resnet_pt2.h"]
    assert "explicit ResnetPt2(const std::string& package_path" in files["resnet_pt2.h"]
    assert "std::vector<at::Tensor> ResnetPt2::run(" in files["resnet_pt2.cpp"]
    assert '#include "resnet_pt2.h"' in files["resnet_pt2.cpp"]


def test_declared_specs_and_ranges_are_baked_in() -> None:
    header = _render(RESNET, "resnet_pt2")["resnet_pt2.h"]
    assert 'static constexpr std::string_view kLabel = "//models:resnet_pt2";' in header
    assert "static constexpr std::size_t kNumInputs = 1;" in header
    assert (
        'InputSpec{"image", c10::ScalarType::Float, "float32", 4,\n'
        '                {DimSpec{"batch", 1, 16}, DimSpec{"", 3, 3}, DimSpec{"", 224, 224}, '
        'DimSpec{"", 224, 224}}, false, 0, 0},'
    ) in header
    assert "std::vector<at::Tensor> operator()(const at::Tensor& image);" in header
    assert """e.g. "ResnetPt2: input 'image' dim 0 is 17, outside [1, 16]".""" in header
    source = _render(RESNET, "resnet_pt2")["resnet_pt2.cpp"]
    assert '", outside ["' in source  # "input 'image' dim 0 is 40, outside [1, 16]"
    assert "std::invalid_argument" in source
    assert "c10::DeviceType::CPU" in source


def test_several_inputs_shared_dims_and_odd_names() -> None:
    files = _render(TWO_INPUTS, "detector_pt2", device="cuda")
    header, source = files["detector_pt2.h"], files["detector_pt2.cpp"]
    assert "class DetectorPt2 {" in header
    assert 'InputSpec{"image", c10::ScalarType::Half, "float16", 4,' in header
    assert '{DimSpec{"batch", 1, 8}, DimSpec{"", 3, 3}, DimSpec{"height", 32, 512}, ' in header
    assert 'InputSpec{"class", c10::ScalarType::Long, "int64", 2,' in header
    # `class` is a keyword: the parameter of operator() is renamed, the input is not.
    assert "operator()(const at::Tensor& image, const at::Tensor& class_);" in header
    assert "return run({image, class_});" in source
    # batch binds two axes, which must agree; height binds one.
    assert "if (inputs[1].size(0) != inputs[0].size(0)) {" in source
    assert source.count("both are the dynamic dim") == 1
    assert "c10::DeviceType::CUDA" in source
    assert '"image, class"' in source


def test_tensorrt_runtime_is_loaded_only_for_tensorrt_packages() -> None:
    inductor = _render(RESNET, "resnet_pt2", device="cuda")
    for text in inductor.values():
        assert "dlopen" not in text
        assert "libtorchtrt_runtime" not in text
        assert "KILN_TORCHTRT_RUNTIME" not in text
    trt = _render(RESNET, "resnet_pt2", device="cuda", backend="tensorrt")
    source = trt["resnet_pt2.cpp"]
    assert "#include <dlfcn.h>" in source
    assert "dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)" in source
    assert 'std::getenv("KILN_TORCHTRT_RUNTIME")' in source
    # before AOTInductor loads the package, whose engines need the runtime's ops
    assert source.index("  load_torchtrt_runtime();") < source.index(
        "std::make_unique<torch::inductor::AOTIModelPackageLoader>"
    )
    assert "${CMAKE_DL_LIBS}" in trt["resnet_pt2Config.cmake"]
    assert 'linkopts = ["-ldl"]' in trt["resnet_pt2.BUILD.bazel"]


def test_cmake_package_and_bazel_build_file() -> None:
    files = _render(RESNET, "resnet_pt2")
    config = files["resnet_pt2Config.cmake"]
    assert "find_dependency(Torch)" in config
    assert "add_library(resnet_pt2::resnet_pt2 INTERFACE IMPORTED)" in config
    assert 'INTERFACE_SOURCES "${CMAKE_CURRENT_LIST_DIR}/resnet_pt2.cpp"' in config
    assert (
        'get_filename_component(resnet_pt2_PACKAGE "${CMAKE_CURRENT_LIST_DIR}/../resnet_pt2.pt2" '
        "ABSOLUTE)"
    ) in config
    # Not named BUILD.bazel: inside its folder that would be a package, its labels invalid.
    build = files["resnet_pt2.BUILD.bazel"]
    assert 'load("@rules_cc//cc:defs.bzl", "cc_library")' in build
    assert "#     new_local_repository(\n" in build  # the WORKSPACE form Bazel 4 reads
    assert 'LIBTORCH = "@libtorch//:torch"' in build
    for line in (
        'name = "resnet_pt2",',
        'srcs = ["resnet_pt2_loader/resnet_pt2.cpp"],',
        'hdrs = ["resnet_pt2_loader/resnet_pt2.h"],',
        'includes = ["resnet_pt2_loader"],',
        'data = ["resnet_pt2.pt2"],',
        "deps = [LIBTORCH],",
    ):
        assert f"\n    {line}\n" in build


def test_declare_loader_library_writes_the_folder() -> None:
    attrs = AotiPackageAttrs(name="resnet_pt2", model="//models:resnet")
    ctx = rule_context(AOTI_PACKAGE, "//models:resnet_pt2", attrs)
    package = File("kiln-out/models/resnet_pt2.pt2", "//models:resnet_pt2")
    files = declare_loader_library(
        ctx, package=package, model=RESNET, device="cpu", backend="inductor"
    )
    folder = "kiln-out/models/resnet_pt2_loader"
    assert [f.path for f in files] == [
        f"{folder}/resnet_pt2.h",
        f"{folder}/resnet_pt2.cpp",
        f"{folder}/resnet_pt2Config.cmake",
        f"{folder}/resnet_pt2.BUILD.bazel",
    ]
    # Only FileWrite actions: nothing runs, and no output duplicates the package.
    assert [a.mnemonic for a in ctx.actions.declared] == ["FileWrite"] * 4
    assert [a.outputs for a in ctx.actions.declared] == [(f,) for f in files]
    assert ctx.actions.declared[0].content == _render(RESNET, "resnet_pt2")["resnet_pt2.h"].encode()


def test_rule_catalogue_does_not_import_jinja2() -> None:
    probe = (
        "import sys, kiln.rules.aoti.aoti_package, kiln.rules.aoti.aoti_loader; "
        "print('jinja2' in sys.modules)"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout.strip() == "False"


# -- compiled and run ------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    package: Path  # kiln-out/models/mlp_pt2.pt2
    loader: Path  # kiln-out/models/mlp_pt2_loader
    spec: ExportSpec  # what the TorchExport action was given (the model and its signature)


def _run(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


def _check(run: subprocess.CompletedProcess[str], what: str) -> None:
    assert run.returncode == 0, f"{what} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"


@pytest.fixture(scope="session")
def built(repo_examples: Path) -> Built:
    """//models:mlp_pt2 (and mlp_sep_pt2) of this repository, built with its own kiln once
    a session."""
    spec = ExportSpec.read(repo_examples / "mlp_pt2.export.json")
    return Built(repo_examples / "mlp_pt2.pt2", repo_examples / "mlp_pt2_loader", spec)


def _compile(jobs: list[list[str]]) -> None:
    """Runs compiler command lines side by side (each is a few seconds of one core)."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        runs = list(pool.map(lambda argv: _run(argv, timeout=600), jobs))
    for argv, run in zip(jobs, runs, strict=True):
        _check(run, " ".join(argv))


def _gxx_app(loader: Path, out: Path, name: str = "mlp_pt2") -> Path:
    """model_app + the loader in `loader` (of target `name`), with plain g++."""
    include = ["-I", str(loader)]
    if name != "mlp_pt2":
        include += [f'-DMODEL_HEADER="{name}.h"', f"-DMODEL_CLASS={class_name(name)}"]
    objects = [out / f"{name}.o", out / "model_app.o"]
    _compile(
        [
            [*GXX_COMPILE, *include, "-c", str(loader / f"{name}.cpp"), "-o", str(objects[0])],
            [
                *GXX_COMPILE,
                *include,
                "-c",
                str(APP_SOURCES / "model_app.cpp"),
                "-o",
                str(objects[1]),
            ],
        ]
    )
    app = out / "model_app"
    _check(_run(["g++", *map(str, objects), "-o", str(app), *GXX_LINK]), "linking model_app")
    return app


@pytest.fixture(scope="session")
def gxx_app(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need("g++")
    return _gxx_app(built.loader, tmp_path_factory.mktemp("gxx"))


@pytest.fixture(scope="session")
def cmake_app(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need("cmake")
    build = tmp_path_factory.mktemp("cmake")
    configure = _run(
        [
            "cmake",
            "-S",
            str(APP_SOURCES),
            "-B",
            str(build),
            f"-DCMAKE_PREFIX_PATH={built.loader};{TORCH_CMAKE_PREFIX}",
        ]
    )
    _check(configure, "cmake configure")
    _check(_run(["cmake", "--build", str(build), "--parallel", "2"], timeout=600), "cmake --build")
    return build / "model_app"


@pytest.fixture(scope="session")
def tensorrt_app(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """model_app against the loader rendered as for backend = "tensorrt" (CPU here)."""
    _need("g++")
    loader = tmp_path_factory.mktemp("trt_loader")
    spec = built.spec
    model = model_info(
        "//models:mlp",
        "models/mlp.py",
        "mlp:build",
        spec.model.signature.inputs,
        spec.model.signature.dynamic_dims,
    )
    source = LoaderSource("mlp_pt2", TARGET, model, "cpu", "tensorrt", "../mlp_pt2.pt2")
    files = render_loader(source)
    for name, text in files.items():
        (loader / name).write_text(text)
    assert "dlopen" in files["mlp_pt2.cpp"]
    return _gxx_app(loader, tmp_path_factory.mktemp("trt"))


@pytest.fixture(scope="session")
def reference(built: Built) -> list[float]:
    """Python's outputs: torch._inductor.aoti_load_package on the app's input, in a child."""
    run = _run([sys.executable, "-c", REFERENCE, str(built.package), str(BATCH)])
    _check(run, "the Python reference")
    return [float(line) for line in run.stdout.split()]


def _outputs(
    app: Path, package: Path, *args: str, env: dict[str, str] | None = None
) -> list[float]:
    run = _run([str(app), str(package), *args], env=env)
    _check(run, f"{app.name} {' '.join(args)}")
    return [float(line) for line in run.stdout.split()]


def _assert_close(actual: list[float], expected: list[float]) -> None:
    assert len(actual) == len(expected) == BATCH * 4  # mlp: 10 -> 64 -> 4
    worst = max(abs(a - e) for a, e in zip(actual, expected, strict=True))
    assert worst <= TOLERANCE, f"max abs difference {worst:.3g} > {TOLERANCE}"


@pytest.mark.torch
def test_loader_folder_is_built_with_the_package(built: Built) -> None:
    names = {p.name for p in built.loader.iterdir()}
    assert names >= {"mlp_pt2.BUILD.bazel", "mlp_pt2.cpp", "mlp_pt2.h", "mlp_pt2Config.cmake"}
    header = (built.loader / "mlp_pt2.h").read_text()
    assert 'InputSpec{"x", c10::ScalarType::Float, "float32", 2,' in header
    assert '{DimSpec{"batch", 1, 64}, DimSpec{"", 10, 10}}' in header


@pytest.mark.torch
def test_gxx_app_matches_python(gxx_app: Path, built: Built, reference: list[float]) -> None:
    _assert_close(_outputs(gxx_app, built.package, str(BATCH)), reference)


@pytest.mark.torch
def test_cmake_app_matches_python(cmake_app: Path, built: Built, reference: list[float]) -> None:
    _assert_close(_outputs(cmake_app, built.package, str(BATCH)), reference)
    # "-": the package the CMake package names (mlp_pt2_PACKAGE), compiled into the app
    _assert_close(_outputs(cmake_app, Path("-"), str(BATCH)), reference)


@pytest.mark.torch
@pytest.mark.parametrize("app", ["gxx_app", "cmake_app"])
@pytest.mark.parametrize("batch", [65, 0])
def test_batch_outside_the_range_is_a_clear_error(
    app: str, batch: int, built: Built, request: pytest.FixtureRequest
) -> None:
    binary: Path = request.getfixturevalue(app)
    run = _run([str(binary), str(built.package), str(batch)])
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    assert (
        f"MlpPt2: input 'x' dim 0 is {batch}, outside [1, 64] (the dynamic dim 'batch')"
        in run.stderr
    )


@pytest.mark.torch
def test_wrong_dtype_and_missing_package_are_clear_errors(gxx_app: Path, built: Built) -> None:
    run = _run([str(gxx_app), str(built.package), str(BATCH), "float64"])
    assert run.returncode == 2
    assert "MlpPt2: input 'x' has dtype float64, expected float32" in run.stderr
    run = _run([str(gxx_app), str(built.loader / "missing.pt2"), str(BATCH)])
    assert run.returncode == 2
    assert "MlpPt2: no package at '" in run.stderr


@pytest.mark.torch
def test_a_package_for_an_instruction_set_this_cpu_lacks_is_refused(
    gxx_app: Path, built: Built, tmp_path: Path
) -> None:
    """Before loading, with one line and exit status 1: no SIGILL in the first call."""
    claimed = tmp_path / "mlp_pt2.pt2"
    isa, missing = claim_beyond_this_cpu(built.package, claimed)
    run = _run([str(gxx_app), str(claimed), str(BATCH)])
    assert run.returncode == 1, run.stderr
    assert run.stdout == ""
    assert run.stderr == (
        f"model_app: failed: MlpPt2: the package '{claimed}' needs the instruction set {isa}; "
        f"this CPU lacks {' '.join(missing)}\n"
    )


@pytest.mark.torch
def test_tensorrt_loader_needs_the_runtime_library(
    tensorrt_app: Path, built: Built, reference: list[float]
) -> None:
    env = dict(os.environ, KILN_TORCHTRT_RUNTIME="/nonexistent/libtorchtrt_runtime.so")
    run = _run([str(tensorrt_app), str(built.package), str(BATCH)], env=env)
    assert run.returncode == 1
    assert (
        "MlpPt2: the package holds TensorRT engines and needs libtorchtrt_runtime.so" in run.stderr
    )
    assert "'/nonexistent/libtorchtrt_runtime.so'" in run.stderr
    assert "KILN_TORCHTRT_RUNTIME" in run.stderr
    # Any library that loads stands in for the runtime: then the package runs as before.
    env["KILN_TORCHTRT_RUNTIME"] = str(TORCH / "lib" / "libc10.so")
    _assert_close(_outputs(tensorrt_app, built.package, str(BATCH), env=env), reference)


@pytest.mark.torch
def test_generated_code_for_several_inputs_compiles(tmp_path: Path) -> None:
    _need("g++")
    files = _render(TWO_INPUTS, "detector_pt2", device="cuda", backend="tensorrt")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    _compile(
        [[*GXX_COMPILE, "-I", str(tmp_path), "-fsyntax-only", str(tmp_path / "detector_pt2.cpp")]]
    )


# -- weights: swapped at run time, loaded at start, checked -----------------------------------

EAGER = """
import sys
import torch
from safetensors.torch import load_file

sys.path.insert(0, "models")
import mlp

model = mlp.build().eval()
model.load_state_dict(load_file(sys.argv[1]))
batch = int(sys.argv[2])
x = torch.arange(batch * 10, dtype=torch.float32).reshape(batch, 10).div(100)
with torch.no_grad():
    for value in model(x).double().flatten().tolist():
        print(repr(value))
"""

RETRAIN = """
import sys
import torch
from safetensors.torch import save_file

sys.path.insert(0, "models")
import mlp

torch.manual_seed(11)
state = {k: v.contiguous() for k, v in mlp.build().state_dict().items()}
out = sys.argv[1]
save_file(state, f"{out}/b.safetensors")
save_file({k: v for k, v in state.items() if k != "net.2.bias"}, f"{out}/missing.safetensors")
save_file({**state, "net.2.bias": torch.zeros(5)}, f"{out}/shape.safetensors")
save_file({**state, "net.0.weight": state["net.0.weight"].double()}, f"{out}/dtype.safetensors")
save_file({**state, "head.bias": torch.zeros(4)}, f"{out}/unknown.safetensors")
with open(f"{out}/garbage.safetensors", "wb") as f:  # a header of 8 bytes that is no object
    f.write((8).to_bytes(8, "little") + b"[1.5]   ")
"""


@dataclass(frozen=True)
class Retrained:
    folder: Path  # b.safetensors (other weights of the mlp) and files that do not fit
    eager_a: list[float]  # eager with the package's own weights (models/mlp.safetensors)
    eager_b: list[float]  # eager with b.safetensors

    @property
    def weights(self) -> Path:
        return self.folder / "b.safetensors"


@pytest.fixture(scope="session")
def retrained(tmp_path_factory: pytest.TempPathFactory) -> Retrained:
    folder = tmp_path_factory.mktemp("retrained")
    _check(_run([sys.executable, "-c", RETRAIN, str(folder)], cwd=REPO), "writing weights")

    def eager(weights: Path) -> list[float]:
        run = _run([sys.executable, "-c", EAGER, str(weights), str(BATCH)], cwd=REPO)
        _check(run, "the eager reference")
        return [float(line) for line in run.stdout.split()]

    return Retrained(
        folder, eager(REPO / "models/mlp.safetensors"), eager(folder / "b.safetensors")
    )


@pytest.fixture(scope="session")
def separate_app(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need("g++")
    loader = built.loader.parent / "mlp_sep_pt2_loader"
    return _gxx_app(loader, tmp_path_factory.mktemp("separate"), "mlp_sep_pt2")


def _sections(stdout: str) -> dict[str, list[str]]:
    """model_app's output split at its '# name' lines."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in stdout.splitlines():
        if line.startswith("# "):
            current, _, rest = line[2:].partition(" ")
            sections[current] = rest.split() if rest else []
        else:
            sections[current].append(line)
    return sections


@pytest.mark.torch
def test_weights_swap_in_a_running_model(gxx_app: Path, built: Built, retrained: Retrained) -> None:
    """Another thread keeps running the model while it swaps to retrained weights: each of
    its runs sees the old weights or the new, and the new ones compute what eager does."""
    run = _run([str(gxx_app), str(built.package), str(BATCH), "--swap", str(retrained.weights)])
    _check(run, "model_app --swap")
    out = _sections(run.stdout)
    _assert_close([float(v) for v in out["before"]], retrained.eager_a)
    _assert_close([float(v) for v in out["after"]], retrained.eager_b)
    runs, same = (int(n) for n in out["concurrent"])
    assert runs >= 100  # 50 before the swap began, 50 after it ended
    assert same == runs


@pytest.mark.torch
@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ("missing", "the weights do not fit the package: missing 1 of 4: 'net.2.bias'"),
        (
            "shape",
            "the weights do not fit the package: 'net.2.bias' is float32 [5], expected float32 [4]",
        ),
        (
            "dtype",
            "the weights do not fit the package: 'net.0.weight' is float64 [64, 10], expected "
            "float32 [64, 10]",
        ),
        ("unknown", "the weights do not fit the package: not weights of this package: 'head.bias'"),
        (
            "garbage",
            "garbage.safetensors' is not valid JSON: a number that is not an integer at byte 2",
        ),
    ],
)
def test_weights_that_do_not_fit_are_refused(
    weights: str, message: str, gxx_app: Path, built: Built, retrained: Retrained
) -> None:
    path = retrained.folder / f"{weights}.safetensors"
    run = _run([str(gxx_app), str(built.package), str(BATCH), "--swap", str(path)])
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("model_app: MlpPt2: ")
    assert message in run.stderr
    assert "# after" not in run.stdout


@pytest.mark.torch
def test_separate_weights_are_loaded_at_start(
    separate_app: Path, built: Built, retrained: Retrained
) -> None:
    """weights = "separate": the .pt2 holds the program alone; the loader reads the weights
    file beside it, or the one it is given."""
    package = built.package.parent / "mlp_sep_pt2.pt2"
    _assert_close(_outputs(separate_app, package, str(BATCH)), retrained.eager_a)
    weights = ("--weights", str(retrained.weights))
    _assert_close(_outputs(separate_app, package, str(BATCH), *weights), retrained.eager_b)


@pytest.mark.torch
def test_the_loader_exposes_the_package_provenance(gxx_app: Path, built: Built) -> None:
    run = _run([str(gxx_app), str(built.package), str(BATCH), "--metadata"])
    _check(run, "model_app --metadata")
    metadata = dict(
        line[2:].split("=", 1) for line in run.stdout.splitlines() if line.startswith("# ")
    )
    out = built.package.parent

    def sha256(name: str) -> str:
        return hashlib.sha256((out / name).read_bytes()).hexdigest()

    assert metadata["kiln.target"] == TARGET
    assert metadata["kiln.model"] == "//models:mlp"
    assert metadata["kiln.weights_form"] == "packaged"
    assert metadata["kiln.weights_file"] == "mlp_pt2.weights.safetensors"
    assert metadata["kiln.weights_sha256"] == sha256("mlp_pt2.weights.safetensors")
    assert metadata["kiln.program_sha256"] == sha256("mlp_pt2.program.pt2")
    assert len(metadata["kiln.compile_key"]) == len(metadata["kiln.join_key"]) == 64
    assert "torch=2.13" in metadata["kiln.toolchain"]
    assert metadata["AOTI_DEVICE_KEY"] == "cpu"  # AOTInductor's own keys stay


# -- kiln's own code is part of what the loader is made from ---------------------------------


@pytest.mark.torch
def test_editing_kiln_code_regenerates_what_it_renders(built: Built, tmp_path: Path) -> None:
    """Reproduces the stale-C++ bug: an edit of kiln/cc_templates.py (which names the
    loader's class) must re-run analysis and the loader's FileWrite actions. A copy of
    kiln is edited, run through PYTHONPATH; the disk cache built above serves the torch
    actions, whose code did not change."""
    copy = _KilnCopy(tmp_path)
    header = copy.workspace / "kiln-out/models/mlp_pt2_loader/mlp_pt2.h"

    _check(copy.build(), "kiln build (a copy of kiln)")
    assert "class MlpPt2 {" in header.read_text()

    original = 'return f"Model{name}" if name[0].isdigit() else name'
    copy.edit("cc_templates.py", original, 'return f"Edited{name}"')
    _check(copy.build(), "kiln build after editing cc_templates.py")
    assert "class EditedMlpPt2 {" in header.read_text()


@pytest.mark.torch
def test_editing_an_action_module_reruns_its_actions_despite_a_cached_analysis(
    built: Built, tmp_path: Path
) -> None:
    """Analysis puts each Python action's code digest in its key, and a build with
    unchanged BUILD files replays the cached analysis: an edit of an action module must
    make that analysis stale, or the build is served the old code's results (it was)."""
    copy = _KilnCopy(tmp_path)
    _check(copy.build(), "kiln build (a copy of kiln)")

    # A comment no run wrote before: the session's disk cache may hold the results of an
    # earlier run's edit, and a key seen before is rightly a hit.
    copy.edit("actions/aoti_manifest.py", "import json\n", f"import json  # {uuid.uuid4()}\n")
    second = copy.build("--explain")
    _check(second, "kiln build after editing kiln/actions/aoti_manifest.py")
    assert "EXPLAIN: AotiManifest //models:mlp_pt2: toolchain changed: kiln_actions" in (
        second.stderr
    )
    assert ", 1 executed" in second.stderr  # the manifest alone: no other action runs again


class _KilnCopy:
    """A copy of kiln (run through PYTHONPATH) and of the models workspace, with an
    output base of its own; the session's disk cache serves what its edits leave."""

    def __init__(self, tmp_path: Path) -> None:
        self.kiln = tmp_path / "kiln-copy"
        shutil.copytree(REPO / "tools", self.kiln / "tools", symlinks=True, ignore=_no_caches)
        shutil.copytree(REPO / "rules", self.kiln / "rules", ignore=_no_caches)
        self.workspace = tmp_path / "ws"
        shutil.copytree(REPO / "models", self.workspace / "models", ignore=_no_caches)
        (self.workspace / "WORKSPACE").write_text("")
        self.env = {**SESSION_ENV, "PYTHONPATH": str(self.kiln / "tools")}
        self.base = tmp_path / "base"

    def build(self, *flags: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "kiln", "--nohome_rc", f"--output_base={self.base}"]
        return _run([*argv, "build", TARGET, *flags], cwd=self.workspace, env=self.env, timeout=900)

    def edit(self, module: str, old: str, new: str) -> None:
        path = self.kiln / "tools/kiln" / module
        text = path.read_text()
        assert old in text, f"{module} no longer holds {old!r}"
        path.write_text(text.replace(old, new, 1))


def _no_caches(directory: str, names: list[str]) -> list[str]:
    del directory
    return [
        n for n in names if n in ("__pycache__", "kiln-out", ".venv") or n.endswith(".egg-info")
    ]
