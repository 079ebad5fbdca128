"""aoti_package end to end on the CPU: real torch.export and AOTInductor packaging.

One workspace (the mlp model) and one disk cache are shared by the tests of
this module, so the compile (tens of seconds) runs once per graph.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kiln_workspace import ModelWorkspace, model_workspace

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]

MLP_BUILD = """
torch_model(
    name = "mlp",
    src = "mlp.py",
    factory = "mlp:build",
    weights = "mlp.safetensors",
    inputs = [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
    dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
)

aoti_package(name = "mlp_pt2", model = ":mlp")
"""


def make_workspace(root: Path, cache: Path, build: str = MLP_BUILD) -> ModelWorkspace:
    mlp = [REPO / "models/mlp.py", REPO / "models/mlp.safetensors"]
    return model_workspace(root, cache, build, mlp)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelWorkspace]:
    base = tmp_path_factory.mktemp("aoti")
    workspace = make_workspace(base / "ws", base / "cache")
    first = workspace.build("//models:mlp_pt2")
    assert first.code == 0, first.err
    # The build output shows the largest error validation found.
    assert "INFO: From AotiValidate //models:mlp_pt2:\nvalidated: max abs error" in first.err
    yield workspace


def test_package_is_validated_against_eager(mlp: ModelWorkspace) -> None:
    report = json.loads((mlp.root / "kiln-out/models/mlp_pt2.validation.json").read_text())
    assert [c["point"] for c in report["checks"]] == ["min", "opt", "max"]
    assert [c["shapes"]["x"][0] for c in report["checks"]] == [1, 8, 64]
    assert (report["rtol"], report["atol"], report["min_cosine"]) == (1e-4, 0.0, 0.999)
    for check in report["checks"]:
        (output,) = check["outputs"]  # abs and relative errors of each output at each point
        assert output["output"] == "output"
        assert output["shape"] == [check["shapes"]["x"][0], 4]
        assert output["max_abs_error"] <= 1e-4 * output["reference_max"]
        assert output["relative_error"] < 1e-4 and output["cosine"] > 0.999 and output["ok"]
    assert report["max_relative_error"] < 1e-4
    assert (mlp.root / "kiln-out/models/mlp_pt2.pt2").stat().st_size > 100_000


def test_the_manifest_says_how_the_weights_got_in_and_holds_the_provenance(
    mlp: ModelWorkspace,
) -> None:
    """<name>.manifest.json: weights joined, no engines, the package's kiln.* metadata;
    an output, so a build that is all cache hits leaves it there too."""
    import torch

    out = mlp.root / "kiln-out/models"
    (out / "mlp_pt2.manifest.json").unlink()
    run = mlp.build("//models:mlp_pt2")
    assert run.code == 0, run.err
    assert run.actions("AotiManifest") == ["cached"]
    manifest = json.loads((out / "mlp_pt2.manifest.json").read_text())
    assert (manifest["kind"], manifest["backend"], manifest["package"]) == (
        "PackageManifest",
        "inductor",
        "mlp_pt2.pt2",
    )
    assert manifest["weights"]["how"] == "joined"
    assert (manifest["engines"], manifest["tensorrt"], manifest["build_gpu"]) == ([], None, None)
    loader = torch._C._aoti.AOTIModelPackageLoader
    metadata = loader.load_metadata_from_package(str(out / "mlp_pt2.pt2"), "model")
    kiln = {k: v for k, v in metadata.items() if k.startswith("kiln.")}
    assert manifest["metadata"] == kiln
    assert manifest["weights"]["sha256"] == kiln["kiln.weights_sha256"]


def test_package_loads_and_runs_in_a_fresh_python(mlp: ModelWorkspace) -> None:
    script = textwrap.dedent(
        """
        import sys, torch, torch._inductor
        sys.path.insert(0, "models")
        import mlp
        from safetensors.torch import load_file
        model = mlp.build().eval()
        model.load_state_dict(load_file("models/mlp.safetensors"))
        package = torch._inductor.aoti_load_package("kiln-out/models/mlp_pt2.pt2")
        x = torch.randn(5, 10)
        print(float((package(x) - model(x)).abs().max()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=mlp.root, capture_output=True, text=True, check=True
    )
    assert float(done.stdout.strip().splitlines()[-1]) < 1e-5


def test_noop_rebuild_runs_nothing(mlp: ModelWorkspace) -> None:
    again = mlp.build("//models:mlp_pt2")
    assert again.code == 0
    assert {e["status"] for e in again.events if e.get("type") == "action_finished"} == {"cached"}


def test_edit_that_keeps_the_graph_reruns_export_but_not_packaging(mlp: ModelWorkspace) -> None:
    """Early cutoff: comments, formatting and a renamed local leave the program, and eager's
    golden outputs, as they were: packaging and validation (which reads no model source)
    are cache hits."""
    goldens = mlp.root / "kiln-out/models/mlp_pt2.golden.safetensors"
    before = goldens.read_bytes()
    source = mlp.root / "models/mlp.py"
    original = source.read_text()
    edited = "# A comment that shifts every line below it.\n\n" + original.replace(
        "return self.net(x)", "result = self.net(x)  # renamed local\n        return result"
    )
    source.write_text(edited)
    try:
        run = mlp.build("//models:mlp_pt2", "--explain")
        assert run.code == 0, run.err
        assert run.actions("TorchExport") == ["executed"]
        assert run.actions("AotiCompile") == ["cached"]
        assert run.actions("AotiJoin") == ["cached"]
        assert run.actions("AotiValidate") == ["cached"]
        assert "EXPLAIN: TorchExport //models:mlp_pt2: input changed: models/mlp.py" in run.err
        assert "EXPLAIN: AotiCompile" not in run.err
        assert "EXPLAIN: AotiValidate" not in run.err
        assert goldens.read_bytes() == before
    finally:
        source.write_text(original)


def test_new_weights_rerun_export_join_and_validation_never_the_compile(
    mlp: ModelWorkspace,
) -> None:
    """A retrained model (a new weights file) is joined to the program compiled before."""
    weights = mlp.root / "models/mlp.safetensors"
    original = weights.read_bytes()
    retrain = (
        "import sys, torch; sys.path.insert(0, 'models'); import mlp; "
        "from safetensors.torch import save_file; torch.manual_seed(7); "
        "save_file(mlp.build().state_dict(), 'models/mlp.safetensors')"
    )
    subprocess.run([sys.executable, "-c", retrain], cwd=mlp.root, check=True)
    try:
        run = mlp.build("//models:mlp_pt2", "--explain")
        assert run.code == 0, run.err
        for mnemonic in ("TorchExport", "AotiJoin", "AotiValidate", "AotiManifest"):
            assert run.actions(mnemonic) == ["executed"], mnemonic
        assert run.actions("AotiCompile") == ["cached"]
        (export,) = [line for line in run.err.splitlines() if "EXPLAIN: TorchExport" in line]
        assert "input changed: " in export and "models/mlp.safetensors" in export
        assert (
            "EXPLAIN: AotiJoin //models:mlp_pt2: input changed: "
            "kiln-out/models/mlp_pt2.weights.safetensors"
        ) in run.err
        assert "EXPLAIN: AotiCompile" not in run.err
        assert "validated: max abs error" in run.err
    finally:
        weights.write_bytes(original)
        # Back to the first build's outputs (all cache hits), for the tests after this one.
        assert mlp.build("//models:mlp_pt2").code == 0


def test_identical_inputs_give_a_byte_identical_package(
    mlp: ModelWorkspace, tmp_path: Path
) -> None:
    other = make_workspace(tmp_path / "elsewhere" / "ws", tmp_path / "fresh-cache")
    run = other.build("//models:mlp_pt2")
    assert run.code == 0, run.err
    assert run.actions("AotiCompile") == ["executed"]  # really rebuilt, not shared
    mine = (mlp.root / "kiln-out/models/mlp_pt2.pt2").read_bytes()
    theirs = (other.root / "kiln-out/models/mlp_pt2.pt2").read_bytes()
    assert mine == theirs
    # Two users' caches (issue 11 A6): torch's state lies in each one's own, not in
    # a shared /tmp path, and the packages still match (the sandbox shows both at
    # /tmp/kiln-torch-tmp).
    for cache in (Path(mlp.env["XDG_CACHE_HOME"]), tmp_path / "fresh-cache"):
        assert any((cache / "kiln/tmp/torch").iterdir())


def test_another_checkout_path_and_venv_path_get_only_cache_hits(
    mlp: ModelWorkspace, tmp_path: Path
) -> None:
    """Issue 11 C1: keys held the interpreter's absolute path, so the same venv through
    another path (or a checkout elsewhere) missed every torch action of a shared cache.
    Here: a second checkout and two more interpreters, each at a path of its own (the
    same venv through a symlink; a venv of its own, whose site-packages reach this
    one's packages), all on the first build's disk cache."""
    another = tmp_path / "another"
    linked = another / "linked-venv"
    another.mkdir()
    linked.symlink_to(sys.prefix, target_is_directory=True)
    venv = another / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    here = sysconfig.get_path("purelib")  # its .pth files (kiln's own) are read too
    (site / "same-packages.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    cache = Path(mlp.env["XDG_CACHE_HOME"])  # the same disk cache; each its own output base
    for n, python in enumerate((linked / "bin/python", venv / "bin/python")):
        other = make_workspace(another / f"checkout{n}", cache)
        run = other.build("//models:mlp_pt2", interpreter=str(python))
        assert run.code == 0, run.err
        assert run.caches() == {"disk"}, run.err
        assert (other.root / "kiln-out/models/mlp_pt2.pt2").read_bytes() == (
            mlp.root / "kiln-out/models/mlp_pt2.pt2"
        ).read_bytes()


def test_noop_rebuild_never_imports_torch(mlp: ModelWorkspace) -> None:
    script = textwrap.dedent(
        """
        import sys
        from kiln.cli import main
        code = main(["build", "//models:mlp_pt2"])
        print(code, "torch" in sys.modules, "pydantic" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=mlp.root,
        env=mlp.env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["0", "False", "False"]
