"""The Python loader kiln generates beside every package: <name>_loader.py.

A loaded .pt2 checks nothing: wrong batch, size, channels or dtype give wrong
results silently, token ids past the vocabulary or a sequence past its max abort
the process. The loader refuses each with the C++ class's message (InputError),
makes channels_last inputs contiguous, and gives the outputs the structure the
model returned, importing the module of a library's output type (or a plain tuple).
It loads a separate-form package's weights at start, and swaps in retrained ones
with the C++ class's checks (WeightsError).

The examples (//models:mlp_pt2, mlp_sep_pt2, resnet_pt2, tiny_lm_pt2) are built once a session
in this repository (tests/e2e/conftest.py); each model's bad inputs run in one
fresh Python, which prints what the loader said to each.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest
from kiln import cpu_isa
from kiln.rules.aoti.aoti_loader import LoaderSource, render_python_loader

from tests.e2e.cpu_claims import claim_beyond_this_cpu
from tests.e2e.test_aoti_package import REPO, make_workspace
from tests.e2e.test_cc_loader import (
    BATCH,
    RESNET,
    TWO_INPUTS,
    Retrained,
    _assert_close,
    retrained,  # noqa: F401 - the session fixture of retrained mlp weights
)
from tests.fake_tensorrt import fake_tensorrt, run_python

pytestmark = pytest.mark.torch

# Runs in a fresh Python in kiln-out/models: CASES maps a case to the inputs given to
# run(); prints {case: the loader's message, or "ok"} as JSON, and "same" where an
# accepted input's outputs equal those of SAME[case] through __call__.
PROBE = """
import json, sys, torch
sys.path.insert(0, ".")
from {module} import {cls}, InputError

model = {cls}()
results = {{}}
{cases}
for case, inputs in CASES.items():
    try:
        out = model.run(inputs)
    except InputError as error:
        results[case] = str(error)
    else:
        results[case] = "ok"
        if case in SAME:
            want = model(*SAME[case])
            results[case] = "same" if torch.equal(out, want) else "differs"
print(json.dumps(results))
"""


def _probe(folder: Path, module: str, cls: str, cases: str) -> dict[str, str]:
    script = PROBE.format(module=module, cls=cls, cases=textwrap.dedent(cases))
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr  # an abort (134) would be the bug this prevents
    result: dict[str, str] = json.loads(run.stdout.splitlines()[-1])
    return result


def test_mlp_batch_and_dtype(repo_examples: Path) -> None:
    said = _probe(
        repo_examples,
        "mlp_pt2_loader",
        "MlpPt2",
        """
        x = torch.randn(4, 10)
        CASES = {
            "ok": [x],
            "batch 65": [torch.randn(65, 10)],
            "batch 0": [torch.randn(0, 10)],
            "float64": [x.double()],
            "int64": [x.long()],
            "rank": [torch.randn(4, 10, 1)],
            "count": [x, x],
            "not a tensor": [[1.0] * 10],
            "device": [x.to("meta")],
        }
        SAME = {"ok": [x]}
        """,
    )
    assert said == {
        "ok": "same",
        # the C++ class's words (tests/e2e/test_cc_loader.py pins the same)
        "batch 65": "MlpPt2: input 'x' dim 0 is 65, outside [1, 64] (the dynamic dim 'batch')",
        "batch 0": "MlpPt2: input 'x' dim 0 is 0, outside [1, 64] (the dynamic dim 'batch')",
        "float64": "MlpPt2: input 'x' has dtype float64, expected float32",
        "int64": "MlpPt2: input 'x' has dtype int64, expected float32",
        "rank": "MlpPt2: input 'x' has 3 dims [4, 10, 1], expected 2 [batch in [1, 64], 10]",
        "count": "MlpPt2: expected 1 input (x), got 2",
        "not a tensor": "MlpPt2: input 'x' is a list, not a torch.Tensor",
        "device": "MlpPt2: input 'x' is on meta, expected cpu (the package was built for cpu)",
    }


def test_resnet_size_channels_and_layout(repo_examples: Path) -> None:
    said = _probe(
        repo_examples,
        "resnet_pt2_loader",
        "ResnetPt2",
        """
        image = torch.randn(2, 3, 224, 224)
        CASES = {
            "channels_last": [image.to(memory_format=torch.channels_last)],
            "size": [torch.randn(2, 3, 225, 224)],
            "channels": [torch.randn(2, 4, 224, 224)],
            "batch 17": [torch.randn(17, 3, 224, 224)],
        }
        SAME = {"channels_last": [image]}
        """,
    )
    declared = "declared [batch in [1, 16], 3, 224, 224]"
    assert said == {
        "channels_last": "same",  # made contiguous first: the same values as the NCHW input
        "size": f"ResnetPt2: input 'image' dim 2 is 225, expected 224 (shape [2, 3, 225, 224], "
        f"{declared})",
        "channels": f"ResnetPt2: input 'image' dim 1 is 4, expected 3 (shape [2, 4, 224, 224], "
        f"{declared})",
        "batch 17": "ResnetPt2: input 'image' dim 0 is 17, outside [1, 16] (the dynamic dim "
        "'batch')",
    }


def test_tiny_lm_token_ids_and_sequence(repo_examples: Path) -> None:
    """What aborts the process without the loader: ids past the vocabulary, seq past 64."""
    said = _probe(
        repo_examples,
        "tiny_lm_pt2_loader",
        "TinyLmPt2",
        """
        ids = torch.randint(0, 1000, (2, 64))
        CASES = {
            "seq 64": [ids],
            "id 1000": [torch.full((2, 8), 1000)],
            "id -1": [torch.full((2, 8), -1)],
            "seq 65": [torch.randint(0, 1000, (2, 65))],
            "int32": [ids.int()],
            "batch 9": [torch.randint(0, 1000, (9, 8))],
        }
        SAME = {"seq 64": [ids]}
        """,
    )
    assert said == {
        "seq 64": "same",
        "id 1000": "TinyLmPt2: input 'ids' holds 1000, outside [0, 1000) (its declared low/high)",
        "id -1": "TinyLmPt2: input 'ids' holds -1, outside [0, 1000) (its declared low/high)",
        "seq 65": "TinyLmPt2: input 'ids' dim 1 is 65, outside [1, 64] (the dynamic dim 'seq')",
        "int32": "TinyLmPt2: input 'ids' has dtype int32, expected int64",
        "batch 9": "TinyLmPt2: input 'ids' dim 0 is 9, outside [1, 8] (the dynamic dim 'batch')",
    }


def test_a_missing_package_is_a_clear_error(repo_examples: Path, tmp_path: Path) -> None:
    shutil.copy(repo_examples / "mlp_pt2_loader.py", tmp_path)
    run = subprocess.run(
        [sys.executable, "-c", "import mlp_pt2_loader; mlp_pt2_loader.MlpPt2()"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert (
        f"FileNotFoundError: MlpPt2: no package at '{tmp_path / 'mlp_pt2.pt2'}' (expected "
        "mlp_pt2.pt2, built by kiln from //models:mlp_pt2)"
    ) in run.stderr


# -- loading: what it costs ----------------------------------------------------------------------

# In a fresh Python in kiln-out/models: torch's vector-ISA probe made to fail, then the
# generated loader loads mlp_pt2 and runs it; prints its outputs' largest difference from
# eager's and whether loading imported torch._inductor.
NO_PROBE = """
import sys, torch
sys.path.insert(0, ".")
sys.path.insert(0, "../../models")
probe = "--probe-fails" in sys.argv
if probe:
    import torch._inductor.cpu_vec_isa as cpu_vec_isa

    def refused():
        raise AssertionError("pick_vec_isa ran")

    cpu_vec_isa.pick_vec_isa = refused
    cpu_vec_isa.valid_vec_isa_list = refused
from mlp_pt2_loader import MlpPt2

model = MlpPt2()
imported = "torch._inductor" in sys.modules
import mlp
from safetensors.torch import load_file

eager = mlp.build().eval()
eager.load_state_dict(load_file("../../models/mlp.safetensors"))
x = torch.randn(7, 10)
with torch.no_grad():
    print(float((model(x) - eager(x)).abs().max()), imported)
"""


def _no_probe(folder: Path, *flags: str) -> tuple[float, bool]:
    run = subprocess.run(
        [sys.executable, "-c", NO_PROBE, *flags],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "Device information mismatch" not in run.stderr
    difference, imported = run.stdout.split()
    return float(difference), imported == "True"


def test_loading_runs_no_vector_isa_probe(repo_examples: Path) -> None:
    """torch's aoti_load_package compiles and dlopens a probe program per instruction set
    (cpu_vec_isa.pick_vec_isa: 2.2 s of a 2.4 s load here) only to warn if the package's
    AOTI_CPU_ISA differs from what this machine would compile for; kiln packages target a
    cpu_target on purpose, and the loader checks /proc/cpuinfo against it itself. The
    loader does not probe, and computes what eager does."""
    difference, _ = _no_probe(repo_examples, "--probe-fails")
    assert difference < 1e-5


def test_loading_imports_no_inductor(repo_examples: Path) -> None:
    """AOTIModelPackageLoader, as the C++ class and kiln's validation load packages:
    importing torch._inductor (and with it torch._dynamo) costs 1.5-2 s in a fresh Python."""
    difference, imported = _no_probe(repo_examples)
    assert difference < 1e-5
    assert not imported


# -- outputs of a library's type -----------------------------------------------------------------

STRUCTURED_BUILD = """
torch_model(
    name = "structured",
    src = "structured.py",
    factory = "structured:build",
    inputs = [{"name": "ids", "shape": [2, 8], "dtype": "int64", "low": 0, "high": 50}],
    dynamic_dims = [{"name": "seq", "min": 1, "max": 16, "axes": {"ids": 1}}],
)

aoti_package(name = "structured_pt2", model = ":structured")
"""

STRUCTURED = """
import sys, torch
sys.path.insert(0, "kiln-out/models")
if "--with-module" in sys.argv:
    sys.path.insert(0, "models")  # where the output type's module, structured.py, is
from structured_pt2_loader import StructuredPt2

ids = torch.randint(0, 50, (2, 5))
try:
    out = StructuredPt2(plain_outputs="--plain" in sys.argv)(ids)
except ImportError as error:
    print("ImportError:", error)
else:
    print(type(out).__name__, [tuple(t.shape) for t in (out if type(out) is tuple else
          (out.logits, out.hidden))])
"""


def _structured(root: Path, *flags: str) -> str:
    run = subprocess.run(
        [sys.executable, "-c", STRUCTURED, *flags],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_outputs_keep_the_models_structure(tmp_path: Path) -> None:
    """A dataclass output registered with torch's pytree, as Hugging Face's ModelOutput
    types are (whose package cannot be called in Python before transformers is imported)."""
    ws = make_workspace(tmp_path / "ws", tmp_path / "cache", STRUCTURED_BUILD)
    shutil.copy(REPO / "tests/models/structured.py", ws.root / "models/structured.py")
    run = ws.build("//models:structured_pt2")
    assert run.code == 0, run.err
    assert _structured(ws.root, "--with-module") == "LMOutput [(2, 5, 50), (2, 5, 8)]"
    assert _structured(ws.root, "--plain") == "tuple [(2, 5, 50), (2, 5, 8)]"
    assert _structured(ws.root) == (
        "ImportError: StructuredPt2: the package's outputs are of type structured.LMOutput, "
        "which torch can rebuild only once the module defining it is imported, and none could "
        "be: install it (e.g. structured), or pass plain_outputs=True for a tuple of the output "
        "tensors"
    )


# -- the rendered text ---------------------------------------------------------------------------


def _render(model: Any, name: str, **kwargs: str) -> str:
    source = LoaderSource(
        name,
        f"//models:{name}",
        model,
        kwargs.get("device", "cpu"),
        kwargs.get("backend", "inductor"),
        f"../{name}.pt2",
    )
    return render_python_loader(source)


def test_the_loader_is_python_naming_every_declared_input() -> None:
    text = _render(TWO_INPUTS, "detector_pt2", device="cuda", backend="tensorrt")
    compile(text, "detector_pt2_loader.py", "exec")
    assert "class DetectorPt2:" in text
    assert "    DEVICE = 'cuda'\n" in text
    # `class` is a keyword: the parameter is renamed, the input is not.
    assert "def __call__(self, image: torch.Tensor, class_: torch.Tensor) -> Any:" in text
    assert "(DimSpec('batch', 1, 8), DimSpec('', 3, 3), DimSpec('height', 32, 512)" in text
    assert "\n        ('batch', ((0, 0), (1, 0))),\n" in text
    assert "_load_torchtrt_runtime()" in text
    resnet = _render(RESNET, "resnet_pt2")
    compile(resnet, "resnet_pt2_loader.py", "exec")
    assert "torchtrt" not in resnet


# In a fresh Python: the TensorRT loader's _load_torchtrt_runtime() with
# $KILN_TORCHTRT_RUNTIME set; prints "loaded", or the ImportError's message.
TORCHTRT_RUNTIME = """
import sys
sys.path.insert(0, sys.argv[1])
import detector_pt2_loader

try:
    detector_pt2_loader._load_torchtrt_runtime()
except ImportError as error:
    print(error)
else:
    print("loaded")
"""


def _torchtrt_runtime(folder: Path, runtime: Path | None, site: Path | None) -> str:
    return run_python(TORCHTRT_RUNTIME, str(folder), site=site, runtime=runtime)


def test_the_tensorrt_runtime_loads_after_tensorrts_library_from_its_wheel(tmp_path: Path) -> None:
    """libtorchtrt_runtime.so alone failed outside the build's environment (on the H100:
    libtensorrt_rtx.so.1 is in the wheel's package folder, on no loader path); the loader
    loads TensorRT's library from that folder first. Without one, the error says so."""
    site, runtime = fake_tensorrt(tmp_path)
    (tmp_path / "detector_pt2_loader.py").write_text(
        _render(TWO_INPUTS, "detector_pt2", device="cuda", backend="tensorrt")
    )
    assert _torchtrt_runtime(tmp_path, runtime, site) == "loaded"
    missing = _torchtrt_runtime(tmp_path, runtime, None)
    assert missing.startswith(
        "DetectorPt2: the package holds TensorRT engines and needs libtorchtrt_runtime.so, "
        "which could not be loaded ("
    )
    assert "libtensorrt_rtx.so.1: cannot open shared object file" in missing
    assert "TensorRT's library: none found in tensorrt_rtx_libs or tensorrt_libs" in missing


def test_the_tensorrt_runtime_is_found_where_torch_tensorrt_is_installed(tmp_path: Path) -> None:
    """Without $KILN_TORCHTRT_RUNTIME the loader finds lib/libtorchtrt_runtime.so in the
    installed torch_tensorrt's folder and loads it, never importing the package (2.4 s of
    a 19 s load on the H100; the fake package raises if imported)."""
    site, _ = fake_tensorrt(tmp_path)
    (tmp_path / "detector_pt2_loader.py").write_text(
        _render(TWO_INPUTS, "detector_pt2", device="cuda", backend="tensorrt")
    )
    assert _torchtrt_runtime(tmp_path, None, site) == "loaded"
    (site / "torch_tensorrt/lib/libtorchtrt_runtime.so").unlink()
    assert "found, never imported" in _torchtrt_runtime(tmp_path, None, site)


# -- weights -------------------------------------------------------------------------------------

WEIGHTS = """
import json, sys, torch
sys.path.insert(0, ".")
from mlp_pt2_loader import MlpPt2, WeightsError
from mlp_sep_pt2_loader import MlpSepPt2

folder = sys.argv[1]
x = torch.arange({batch} * 10, dtype=torch.float32).reshape({batch}, 10).div(100)
said = {{}}
separate = MlpSepPt2()
said["separate"] = separate(x).flatten().tolist()
said["separate given b"] = MlpSepPt2(weights_path=f"{{folder}}/b.safetensors")(x).flatten().tolist()
packaged = MlpPt2()
said["packaged"] = packaged(x).flatten().tolist()
packaged.load_weights(f"{{folder}}/b.safetensors")
said["packaged swapped to b"] = packaged(x).flatten().tolist()
for bad in ("missing", "shape", "dtype", "unknown", "garbage"):
    try:
        packaged.load_weights(f"{{folder}}/{{bad}}.safetensors")
    except WeightsError as error:
        said[bad] = str(error)
said["after refusals"] = packaged(x).flatten().tolist()
said["provenance"] = separate.metadata()["kiln.target"]
print(json.dumps(said))
"""


def test_weights_load_at_start_or_swap_in_checked(
    repo_examples: Path,
    retrained: Retrained,  # noqa: F811 - the fixture imported above
) -> None:
    """weights = "separate": the loader reads the weights file beside the package (or the
    one given); load_weights replaces a package's weights with a retrained file's, and
    refuses weights that do not fit with the C++ class's words, changing nothing."""
    run = subprocess.run(
        [sys.executable, "-c", WEIGHTS.format(batch=BATCH), str(retrained.folder)],
        cwd=repo_examples,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    said = json.loads(run.stdout)
    _assert_close(said["separate"], retrained.eager_a)
    _assert_close(said["packaged"], retrained.eager_a)
    _assert_close(said["separate given b"], retrained.eager_b)
    _assert_close(said["packaged swapped to b"], retrained.eager_b)
    _assert_close(said["after refusals"], retrained.eager_b)
    unfit = "MlpPt2: the weights do not fit the package: "
    assert said["missing"] == unfit + "missing 1 of 4: 'net.2.bias'"
    assert said["shape"] == unfit + "'net.2.bias' is float32 [5], expected float32 [4]"
    assert said["dtype"] == unfit + "'net.0.weight' is float64 [64, 10], expected float32 [64, 10]"
    assert said["unknown"] == unfit + "not weights of this package: 'head.bias'"
    assert said["garbage"].startswith("MlpPt2: '")
    assert "is not a safetensors file" in said["garbage"]
    assert said["provenance"] == "//models:mlp_sep_pt2"


def test_a_package_for_an_instruction_set_this_cpu_lacks_is_refused(
    repo_examples: Path, tmp_path: Path
) -> None:
    """Before loading: its first call would die of SIGILL, with no word of why."""
    shutil.copy(repo_examples / "mlp_pt2_loader.py", tmp_path)
    isa, missing = claim_beyond_this_cpu(repo_examples / "mlp_pt2.pt2", tmp_path / "mlp_pt2.pt2")
    run = subprocess.run(
        [sys.executable, "-c", "import mlp_pt2_loader; mlp_pt2_loader.MlpPt2()"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert run.stderr.splitlines()[-1] == (
        f"mlp_pt2_loader.CpuError: MlpPt2: the package '{tmp_path / 'mlp_pt2.pt2'}' needs the "
        f"instruction set {isa}; this CPU lacks {' '.join(missing)}"
    )


def test_the_package_names_the_instruction_set_it_was_compiled_for(repo_examples: Path) -> None:
    """The default, x86-64-v3: AVX2 code, which torch's own AOTI_CPU_ISA names too."""
    metadata = _metadata(repo_examples / "mlp_pt2.pt2")
    assert metadata["kiln.cpu_target"] == "x86-64-v3"
    assert metadata["kiln.cpu_isa"] == "x86-64-v3"
    assert metadata["kiln.cpu_isa_flags"].split() == list(cpu_isa.isa_of("x86-64-v3").flags)
    assert metadata["AOTI_CPU_ISA"] == "AVX2"


def _metadata(package: Path) -> dict[str, str]:
    with zipfile.ZipFile(package) as archive:
        (record,) = [r for r in archive.namelist() if r.endswith(".wrapper_metadata.json")]
        loaded: dict[str, str] = json.loads(archive.read(record))
    return loaded
