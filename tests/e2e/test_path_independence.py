"""No output-root or interpreter path reaches an artifact's bytes: the same spec, two output
roots, two paths of the Python environment.

kiln writes outputs under kiln-out/, Bazel under bazel-out/<cfg>/bin/; the
specs name those paths, and the action modules are the same for both tools.
Here aoti_package's own implementation declares the mlp's actions twice, with
output roots `kiln-out` and Bazel's, and the actions run (real torch.export,
AOTInductor, validation) in two execroots at different paths. Every artifact
must come out byte for byte the same; the specs only differ in the root. The
second runs its actions through another path of the same environment (a link
to .venv, so torch's headers are at another path, as in another checkout):
inductor names those folders in what it writes (actions/toolchain_paths.py).

The two packagings share one private inductor cache name (that is the point)
and so run one after the other under its lock: about 40 s on two cores.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kiln.action_graph import Action
from kiln.exec.spawn import resolve_argv
from kiln.host_facts import HostFacts, ToolchainResolver
from kiln.rule_api import AnalyzedTarget, DefaultInfo, File, RuleContext
from kiln.rules.aoti.aoti_package import RULE as AOTI_PACKAGE
from kiln.rules.model.torch_model import RULE as TORCH_MODEL

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("kiln-out", "bazel-out/k8-fastbuild/bin")
SOURCES = ("models/mlp.py", "models/mlp.safetensors")
# The artifacts, relative to <root>/models: what must not depend on the root.
ARTIFACTS = (
    "mlp_pt2.structure.pt2",
    "mlp_pt2.weights.safetensors",
    "mlp_pt2.golden.safetensors",
    "mlp_pt2.program.pt2",
    "mlp_pt2.layout.json",
    "mlp_pt2.pt2",
    "mlp_pt2.validation.json",
    "mlp_pt2.manifest.json",
    "mlp_pt2_loader/mlp_pt2.h",
    "mlp_pt2_loader/mlp_pt2.cpp",
    "mlp_pt2_loader/mlp_pt2Config.cmake",
    "mlp_pt2_loader/mlp_pt2.BUILD.bazel",
    "mlp_pt2_loader.py",
)


def analyze(output_root: str) -> list[Action]:
    """The actions of //models:mlp_pt2 with outputs under `output_root`, as rules declare them."""
    toolchains = ToolchainResolver(HostFacts.of_this_machine())
    sources = {
        f"//models:{Path(p).name}": AnalyzedTarget("", {DefaultInfo: DefaultInfo((File(p),))})
        for p in SOURCES
    }
    model_attrs = TORCH_MODEL.attrs.model_validate(
        {
            "name": "mlp",
            "src": "//models:mlp.py",
            "factory": "mlp:build",
            "weights": "//models:mlp.safetensors",
            "inputs": [{"name": "x", "shape": [8, 10], "dtype": "float32"}],
            "dynamic_dims": [{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}],
        }
    )
    model = RuleContext(TORCH_MODEL, "//models:mlp", model_attrs, sources, toolchains)
    assert TORCH_MODEL.impl is not None and AOTI_PACKAGE.impl is not None
    providers = {type(p): p for p in TORCH_MODEL.impl(model)}
    deps = {"//models:mlp": AnalyzedTarget("//models:mlp", providers)}
    attrs = AOTI_PACKAGE.attrs.model_validate({"name": "mlp_pt2", "model": "//models:mlp"})
    ctx = RuleContext(
        AOTI_PACKAGE, "//models:mlp_pt2", attrs, deps, toolchains, output_root=output_root
    )
    AOTI_PACKAGE.impl(ctx)
    return ctx.actions.declared


def run(actions: list[Action], execroot: Path, python: str) -> None:
    """Runs the actions in declaration order (dependencies first) in `execroot`, with
    `python` as the interpreter."""
    for path in SOURCES:
        (execroot / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, execroot / path)
    for action in actions:
        for output in action.outputs:
            (execroot / output.path).parent.mkdir(parents=True, exist_ok=True)
        if action.content is not None:
            (execroot / action.primary_output.path).write_bytes(action.content)
            continue
        done = subprocess.run(
            resolve_argv(action.argv, python),  # argv[0] is the symbolic 'python'
            cwd=execroot,
            env=dict(action.env),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"{action.describe()} failed:\n{done.stderr[-3000:]}"


def digests(folder: Path) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in ARTIFACTS}


@pytest.fixture(scope="module")
def pythons(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """This interpreter, and the same environment's through a link elsewhere."""
    environment = Path(sys.prefix)
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "venv"
    elsewhere.symlink_to(environment)
    return sys.executable, str(elsewhere / Path(sys.executable).relative_to(environment))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, pythons: tuple[str, str]) -> dict[str, Path]:
    """root -> the execroot the mlp was built in with that output root (and interpreter)."""
    base = tmp_path_factory.mktemp("roots")
    execroots = {root: base / f"execroot-{i}" / "kiln" for i, root in enumerate(ROOTS)}
    with ThreadPoolExecutor(max_workers=len(ROOTS)) as pool:
        runs = [
            pool.submit(run, analyze(root), execroot, python)
            for (root, execroot), python in zip(execroots.items(), pythons, strict=True)
        ]
        for future in runs:
            future.result()
    return execroots


def test_artifacts_are_the_same_bytes_under_either_output_root(built: dict[str, Path]) -> None:
    found = {root: digests(execroot / root / "models") for root, execroot in built.items()}
    kiln, bazel = found.values()
    assert kiln == bazel


def test_specs_differ_only_in_the_output_root(built: dict[str, Path]) -> None:
    """The inputs did differ (else the test above proves nothing): each spec names its root."""
    kiln_root, bazel_root = ROOTS
    kiln, bazel = built.values()
    specs = sorted(p.name for p in (kiln / kiln_root / "models").glob("*.json"))
    assert specs == [
        "mlp_pt2.compile.json",
        "mlp_pt2.export.json",
        "mlp_pt2.join.json",
        "mlp_pt2.layout.json",
        "mlp_pt2.manifest.json",
        "mlp_pt2.manifest_spec.json",
        "mlp_pt2.needs.json",
        "mlp_pt2.validate.json",
        "mlp_pt2.validation.json",
    ]
    for name in ("mlp_pt2.compile.json", "mlp_pt2.export.json", "mlp_pt2.join.json"):
        text = (kiln / kiln_root / "models" / name).read_text()
        assert f"{kiln_root}/models/" in text
        assert (bazel / bazel_root / "models" / name).read_text() == text.replace(
            f"{kiln_root}/", f"{bazel_root}/"
        )


def test_execroots_were_apart(built: dict[str, Path]) -> None:
    first, second = (os.path.realpath(p) for p in built.values())
    assert first != second


def test_the_two_interpreters_found_torch_at_different_paths(pythons: tuple[str, str]) -> None:
    """Else the first test would not show that torch's path stays out of the bytes."""
    found = [
        subprocess.run(
            [
                python,
                "-c",
                "import importlib.util; print(importlib.util.find_spec('torch').origin)",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for python in pythons
    ]
    assert found[0] != found[1]
