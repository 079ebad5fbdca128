"""Weights as their own artifact: the compile never sees weight values, the join puts them in.

A tiny model has what Inductor inlines into kernels as literals without kiln's settings
(biases of 4 and 8 elements, a LayerNorm of width 8, a 0-d buffer, persistent and
non-persistent buffers). It is built first with weights A, the factory's own init
(LayerNorm ones and zeros: uniform values, what a compiler may fold), then with
weights B from a file, in both deployment forms; one workspace and disk cache for
the module, so two compiles, then joins. ResNet-18 shows the same for a new
model_weights seed. And on this torch (2.13) a compile without
always_keep_tensor_constants does inline small weights: AotiCompile refuses that.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kiln_workspace import BuildResult, ModelWorkspace, model_workspace

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]

TINY = '''
"""Every kind of weight Inductor would inline (1-d of <= 8 elements, 0-d), buffers, a tie."""
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)  # a bias of 8
        self.norm = nn.LayerNorm(8)  # weight and bias of 8: ones and zeros at init
        self.mix = nn.Linear(8, 8, bias=False)
        self.remix = nn.Linear(8, 8, bias=False)
        self.remix.weight = self.mix.weight  # tied: one tensor, two names
        self.out = nn.Linear(8, 4)  # a bias of 4
        self.register_buffer("scale", torch.rand(4))
        self.register_buffer("shift", torch.rand(4), persistent=False)
        self.register_buffer("gain", torch.tensor(1.5))

    def forward(self, x):
        y = self.out(self.remix(self.mix(torch.relu(self.norm(self.inp(x))))))
        return y * self.scale * self.gain + self.shift


def build():
    return Tiny()
'''

TINY_BUILD = """
torch_model(
    name = "tiny",
    src = "tiny.py",
    factory = "tiny:build",{weights}
    inputs = [{{"name": "x", "shape": [4, 6], "dtype": "float32"}}],
    dynamic_dims = [{{"name": "batch", "min": 1, "max": 8, "axes": {{"x": 0}}}}],
)

aoti_package(name = "tiny_pt2", model = ":tiny")
aoti_package(name = "tiny_sep", model = ":tiny", weights = "separate")
"""

# Weights B: every parameter and persistent buffer drawn anew, none uniform.
RETRAIN = """
import torch
from safetensors.torch import save_file
import tiny

torch.manual_seed(3)
state = {k: torch.randn_like(v) * 0.5 for k, v in tiny.build().state_dict().items()}
save_file(state, "b.safetensors")
"""

# Each form's outputs against eager with weights A and B, at batch 1, 4 and 8.
COMPARE = """
import json, sys, torch, torch._inductor
from safetensors.torch import load_file
sys.path.insert(0, "models")
import tiny
from kiln.actions.package_loading import load_into

def eager(weights):
    torch.manual_seed(0)  # as kiln builds a torch_model: the non-persistent buffer's init
    model = tiny.build().eval()
    if weights:
        model.load_state_dict(load_file(weights))
    return model

a, b = eager(None), eager("models/b.safetensors")
packaged = torch._inductor.aoti_load_package("kiln-out/models/tiny_pt2.pt2")
separate = torch._inductor.aoti_load_package("kiln-out/models/tiny_sep.pt2")
load_into(separate, "kiln-out/models/tiny_sep.weights.safetensors")
errors = {}
for batch in (1, 4, 8):
    x = torch.randn(batch, 6)
    with torch.no_grad():
        for name, package in (("packaged", packaged), ("separate", separate)):
            got = package(x)
            errors.setdefault(name + " vs B", []).append(float((got - b(x)).abs().max()))
            errors.setdefault(name + " vs A", []).append(float((got - a(x)).abs().max()))
print(json.dumps(errors))
"""

METADATA = """
import json, sys, torch
loader = torch._C._aoti.AOTIModelPackageLoader
print(json.dumps(loader.load_metadata_from_package(sys.argv[1], "model")))
"""


@dataclass
class Retrained:
    workspace: ModelWorkspace
    first: BuildResult  # with weights A
    second: BuildResult  # with weights B, --explain
    metadata_a: dict[str, str]  # tiny_pt2's, built with A

    def metadata(self, target: str) -> dict[str, str]:
        package = f"kiln-out/models/{target}.pt2"
        loaded: dict[str, str] = json.loads(self.workspace.python(METADATA, package))
        return loaded

    def out(self, name: str) -> Path:
        return self.workspace.root / "kiln-out/models" / name


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Retrained]:
    base = tmp_path_factory.mktemp("weights")
    source = base / "tiny.py"
    source.write_text(textwrap.dedent(TINY))
    workspace = model_workspace(
        base / "ws", base / "cache", TINY_BUILD.format(weights=""), [source]
    )
    first = workspace.build("//models:all")
    assert first.code == 0, first.err
    assert first.actions("AotiCompile") == ["executed", "executed"]
    package = Retrained(workspace, first, first, {})
    metadata_a = package.metadata("tiny_pt2")

    subprocess.run([sys.executable, "-c", RETRAIN], cwd=workspace.root / "models", check=True)
    weights = '\n    weights = "b.safetensors",'
    (workspace.root / "models/BUILD").write_text(TINY_BUILD.format(weights=weights))
    second = workspace.build("//models:all", "--explain")
    assert second.code == 0, second.err
    yield Retrained(workspace, first, second, metadata_a)


def test_new_weights_rerun_export_join_and_validation_never_the_compile(tiny: Retrained) -> None:
    run = tiny.second
    assert run.actions("AotiCompile") == ["cached", "cached"]
    for mnemonic in ("TorchExport", "AotiJoin", "AotiValidate"):
        assert run.actions(mnemonic) == ["executed", "executed"], mnemonic
    assert "EXPLAIN: AotiCompile" not in run.err
    # The structure TorchExport wrote is the same file: the compile's one input.
    assert "input changed: kiln-out/models/tiny_pt2.weights.safetensors" in run.err
    assert "input changed: kiln-out/models/tiny_pt2.structure.pt2" not in run.err


def test_both_forms_compute_with_the_new_weights_as_eager_does(tiny: Retrained) -> None:
    """Compiled from the structure of A, joined with B: the outputs are B's, never A's."""
    errors = json.loads(tiny.workspace.python(COMPARE))
    for form in ("packaged", "separate"):
        assert max(errors[f"{form} vs B"]) < 1e-5, errors
        assert min(errors[f"{form} vs A"]) > 1e-2, errors  # the weights really changed


def test_the_separate_program_holds_no_weights(tiny: Retrained) -> None:
    def records(name: str) -> list[str]:
        with zipfile.ZipFile(tiny.out(name)) as archive:
            return archive.namelist()

    assert any(r.endswith("_weights.blob") for r in records("tiny_pt2.pt2"))
    assert not any(r.endswith("_weights.blob") for r in records("tiny_sep.pt2"))
    assert any(r.endswith(".so") for r in records("tiny_sep.pt2"))


def test_the_package_names_its_target_keys_digests_and_toolchain(tiny: Retrained) -> None:
    a, b = tiny.metadata_a, tiny.metadata("tiny_pt2")
    weights = tiny.out("tiny_pt2.weights.safetensors").read_bytes()
    program = tiny.out("tiny_pt2.program.pt2").read_bytes()
    assert b["kiln.target"] == "//models:tiny_pt2"
    assert b["kiln.model"] == "//models:tiny"
    assert b["kiln.weights_sha256"] == hashlib.sha256(weights).hexdigest()
    assert b["kiln.program_sha256"] == hashlib.sha256(program).hexdigest()
    # One compile, two joins.
    assert a["kiln.compile_key"] == b["kiln.compile_key"]
    assert a["kiln.program_sha256"] == b["kiln.program_sha256"]
    assert a["kiln.join_key"] != b["kiln.join_key"]
    assert a["kiln.weights_sha256"] != b["kiln.weights_sha256"]
    assert "torch=2.13" in b["kiln.toolchain"]
    listed = json.loads(b["kiln.weights"])
    assert listed["norm.weight"] == ["float32", [8], [1]]
    assert listed["gain"] == ["float32", [], []]
    assert "shift" in listed  # a non-persistent buffer is a weight too
    tied = json.loads(b["kiln.weights_tied"])
    assert tied in ({"remix.weight": "mix.weight"}, {"mix.weight": "remix.weight"})
    separate = tiny.metadata("tiny_sep")
    assert separate["kiln.weights_form"] == "separate"
    assert separate["kiln.weights_file"] == "tiny_sep.weights.safetensors"


PIN = """
import sys, tempfile
from pathlib import Path
import torch, torch._inductor
sys.path.insert(0, "models")
import tiny
from kiln.actions import constant_layout, weights_split
from kiln.actions.aoti_compile import SPLIT_CONFIGS
from kiln.actions.spec import ActionFailure

config = torch._inductor.config
assert config.aot_inductor.package_constants_in_so is True  # the defaults kiln changes
assert config.aot_inductor.package_constants_on_disk_format is None
assert config.always_keep_tensor_constants is False

torch.manual_seed(0)
batch = torch.export.Dim("batch", min=1, max=8)
example = (torch.randn(4, 6),)
program = torch.export.export(tiny.build().eval(), example, dynamic_shapes=({0: batch},))
structure = Path(sys.argv[1]) / "structure.pt2"
weights_split.save_structure(program, structure, weights_split.split(program)[1])
program = weights_split.load_structure(structure, "cpu")  # as AotiCompile loads it
package = Path(sys.argv[1]) / "inlined.pt2"
configs = {**SPLIT_CONFIGS, "always_keep_tensor_constants": False}
torch._inductor.aoti_compile_and_package(
    program, package_path=str(package), inductor_configs=configs
)
try:
    constant_layout.layout_of(package, program, "cpu")
except ActionFailure as error:
    print(error)
"""


def test_without_always_keep_tensor_constants_small_weights_are_inlined(
    tiny: Retrained, tmp_path: Path
) -> None:
    """The torch fact the split rests on (Inductor's can_inline_constant: 0-d and 1-d of
    <= 8 elements), and kiln's guard against it: AotiCompile refuses such a program."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    done = subprocess.run(
        [sys.executable, "-c", PIN, str(tmp_path)],
        cwd=tiny.workspace.root,
        env={**tiny.workspace.env, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "AOTInductor compiled the value of 7 weight(s) into the program's code (gain, "
        "inp.bias, norm.bias, norm.weight, out.bias): small constants are inlined unless "
        "always_keep_tensor_constants is set, so other weights could not be joined in"
    )


# -- ResNet-18: a new model_weights seed -----------------------------------------------------

RESNET_BUILD = """
model_weights(
    name = "resnet_weights",
    src = "resnet.py",
    factory = "resnet:build",
    seed = {seed},
    out = "resnet18.safetensors",
)

torch_model(
    name = "resnet",
    src = "resnet.py",
    factory = "resnet:build",
    weights = ":resnet18.safetensors",
    inputs = [{{"name": "image", "shape": [2, 3, 224, 224], "dtype": "float32"}}],
    dynamic_dims = [{{"name": "batch", "min": 1, "max": 16, "axes": {{"image": 0}}}}],
)

aoti_package(name = "resnet_pt2", model = ":resnet")
"""


def test_resnet_new_seed_reruns_weights_export_join_and_validation_only(
    tmp_path: Path,
) -> None:
    build = RESNET_BUILD.format(seed=18)
    workspace = model_workspace(
        tmp_path / "ws", tmp_path / "cache", build, [REPO / "models/resnet.py"]
    )
    first = workspace.build("//models:resnet_pt2")
    assert first.code == 0, first.err
    assert first.actions("AotiCompile") == ["executed"]
    (workspace.root / "models/BUILD").write_text(RESNET_BUILD.format(seed=19))
    second = workspace.build("//models:resnet_pt2", "--explain")
    assert second.code == 0, second.err
    for mnemonic in ("ModelWeights", "TorchExport", "AotiJoin", "AotiValidate"):
        assert second.actions(mnemonic) == ["executed"], mnemonic
    assert second.actions("AotiCompile") == ["cached"]
    assert "EXPLAIN: AotiCompile" not in second.err
    assert "INFO: From AotiValidate //models:resnet_pt2:\nvalidated: max abs error" in second.err
