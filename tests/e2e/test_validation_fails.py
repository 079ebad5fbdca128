"""Validation can fail: deliberately wrong packages of every example model are caught.

Each example model (models/: mlp, resnet, tiny_lm; and tests/models/small_outputs.py,
whose outputs are of magnitude 1e-5 like a random-weight EfficientNet's) is wrapped
by tests/models/wrong.py so that its exported program, and so its real AOTInductor
package, returns zeros or its outputs permuted, while eager (the goldens) stays
right. One kiln build (--keep_going) makes them all; each AotiValidate must fail
with its one paragraph. A package that aborts the process at a shape point is
reported as a failed check at that point, not a crash.

The same model packaged right passes (small_outputs_pt2): tolerances scale with
the outputs, so 1e-5 outputs are held to 1e-9, and right ones still pass.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator

import pytest

from tests.e2e.test_aoti_package import REPO, ModelWorkspace, make_workspace
from tests.kiln_workspace import BuildResult

pytestmark = pytest.mark.torch

TESTS_MODELS = REPO / "tests" / "models"

# name -> (inputs, dynamic dims) as models/BUILD declares them (small_outputs: as here)
EXAMPLES = {
    "mlp": (
        '[{"name": "x", "shape": [8, 10]}]',
        '[{"name": "batch", "min": 1, "max": 64, "axes": {"x": 0}}]',
    ),
    "resnet": (
        '[{"name": "image", "shape": [2, 3, 224, 224]}]',
        '[{"name": "batch", "min": 1, "max": 16, "axes": {"image": 0}}]',
    ),
    "tiny_lm": (
        '[{"name": "ids", "shape": [2, 16], "dtype": "int64", "low": 0, "high": 1000}]',
        '[{"name": "batch", "min": 1, "max": 8, "axes": {"ids": 0}}, '
        '{"name": "seq", "min": 1, "max": 64, "axes": {"ids": 1}}]',
    ),
    "small_outputs": (
        '[{"name": "image", "shape": [2, 3, 32, 32]}]',
        '[{"name": "batch", "min": 1, "max": 8, "axes": {"image": 0}}]',
    ),
}
# Every example zeroed; permuted where it matters most and packaging is quick (each
# package is 8-15 s of the suite's time).
WRONG = [(m, "zeroed") for m in EXAMPLES] + [(m, "permuted") for m in ("mlp", "small_outputs")]


def _target(name: str, model: str, src: str, factory: str, kwargs: str = "{}") -> str:
    inputs, dims = EXAMPLES[model]
    deps = f'["{model}.py"]' if src == "wrong.py" else "[]"
    return f"""
torch_model(
    name = "{name}",
    src = "{src}",
    deps = {deps},
    factory = "{factory}",
    factory_kwargs = {kwargs},
    inputs = {inputs},
    dynamic_dims = {dims},
)

aoti_package(name = "{name}_pt2", model = ":{name}")
"""


BUILD = "".join(
    _target(
        f"{model}_{how}",
        model,
        "wrong.py",
        "wrong:build",
        f'{{"model": "{model}", "how": "{how}"}}',
    )
    for model, how in [*WRONG, ("tiny_lm", "aborts")]
) + _target("small_outputs", "small_outputs", "small_outputs.py", "small_outputs:build")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModelWorkspace, BuildResult]]:
    base = tmp_path_factory.mktemp("wrong")
    ws = make_workspace(base / "ws", base / "cache", BUILD)
    for name in ("resnet.py", "tiny_lm.py"):
        shutil.copy(REPO / "models" / name, ws.root / "models" / name)
    for name in ("wrong.py", "small_outputs.py"):
        shutil.copy(TESTS_MODELS / name, ws.root / "models" / name)
    yield ws, ws.build("//models/...", "--keep_going")


def _paragraph(err: str, target: str) -> str:
    """The action error reported for AotiValidate of `target`."""
    found = re.search(
        rf"ERROR: models/BUILD:\d+:1: AotiValidate //models:{target} failed: [^\n]*\n"
        r"kiln-action-error: (.*?)(?=\nERROR: |\nINFO: |\Z)",
        err,
        re.S,
    )
    assert found, f"no AotiValidate failure of {target} in:\n{err}"
    return found.group(1)


@pytest.mark.parametrize(("model", "how"), WRONG, ids=[f"{m}-{h}" for m, h in WRONG])
def test_a_wrong_package_fails_validation(
    built: tuple[ModelWorkspace, BuildResult], model: str, how: str
) -> None:
    ws, run = built
    assert run.code == 1
    assert "Traceback" not in run.err
    text = _paragraph(run.err, f"{model}_{how}_pt2")
    head = f"//models:{model}_{how}_pt2: the package's output differs from eager at the min shapes"
    assert text.startswith(head), text
    assert re.search(r"cosine similarity -?0\.\d+ \(allowed: >= 0\.999\)", text)
    looks = "is all zeros" if how == "zeroed" else "holds eager's values in another order"
    assert f"(allowed: >= 0.999); the package's output {looks}\n" in text
    assert f"fix the model of //models:{model}_{how}" in text
    assert f"loosen rtol, atol or min_cosine of //models:{model}_{how}_pt2" in text
    # Nothing of a target that did not build stays in kiln-out/ looking built: not the
    # report, not the package, not the loaders placed before validation failed.
    out = ws.root / "kiln-out/models"
    for name in (".validation.json", ".pt2", "_loader", "_loader.py"):
        assert not (out / f"{model}_{how}_pt2{name}").exists(), name
    assert f"//models:{model}_{how}_pt2" in run.err.split("removed from kiln-out/: ")[1]


def test_tiny_outputs_are_held_to_their_own_scale(
    built: tuple[ModelWorkspace, BuildResult],
) -> None:
    """small_outputs' logits are ~1e-5: the zeroed package's error is under the old atol of
    1e-4, yet it fails, while the right package passes, its error relative to 1e-5."""
    ws, run = built
    zeroed = _paragraph(run.err, "small_outputs_zeroed_pt2")
    figures = re.search(r"max abs error ([0-9.e+-]+), relative 1 to", zeroed)
    assert figures, zeroed
    assert float(figures.group(1)) < 1e-4  # what rtol = atol = 1e-4 (allclose) accepted
    report = json.loads((ws.root / "kiln-out/models/small_outputs_pt2.validation.json").read_text())
    assert [c["point"] for c in report["checks"]] == ["min", "opt", "max"]
    for check in report["checks"]:
        (output,) = check["outputs"]
        assert output["reference_max"] < 1e-4
        assert output["relative_error"] < 1e-4
        assert output["cosine"] > 0.999
        assert check["ok"]


def test_a_package_that_aborts_is_a_failed_check_at_its_shape_point(
    built: tuple[ModelWorkspace, BuildResult],
) -> None:
    _, run = built
    text = _paragraph(run.err, "tiny_lm_aborts_pt2")
    assert text.startswith(
        "//models:tiny_lm_aborts_pt2: the package was killed by SIGABRT at the min shapes "
        "(ids: [1, 1])"
    ), text
    assert "hint: eager runs at these shapes" in text
    assert "Traceback" not in text
