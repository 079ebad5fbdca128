"""The example tests: `kiln test` of //models/tests and //models/benchmarks (the mlp on
its checked-in test set, ResNet-18's latency) in the repository, and of //models/tests
in examples/libraries (a timm ResNet on 16 images a reader makes from a seed); a second
run is served cached.

Both reuse their session's build (conftest.py: repo_examples, library_examples), so what
runs here is the eager pass over the data, the tests, and the benchmark's C++ loader.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, SESSION_ENV
from tests.e2e.library_examples import KILN, LibraryExamples

pytestmark = pytest.mark.torch


def kiln_test(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KILN, "--nohome_rc", "test", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


def status(err: str, label: str) -> str:
    line = next(line for line in err.splitlines() if line.startswith(label + " "))
    return line[len(label) :].strip()


def table(log: Path) -> dict[str, list[str]]:
    """The verdict table of a model_test's or model_benchmark's test.log, by first cell."""
    return {line.split()[0]: line.split() for line in log.read_text().splitlines() if line.strip()}


def test_the_mlp_data_is_what_its_script_makes(tmp_path: Path) -> None:
    out = tmp_path / "mlp_data.safetensors"
    subprocess.run(
        [sys.executable, "models/tests/make_mlp_data.py", str(out)], cwd=REPO, check=True
    )
    assert out.read_bytes() == (REPO / "models/tests/mlp_data.safetensors").read_bytes()


def test_models_tests_pass_and_a_rerun_is_cached(repo_examples: Path) -> None:
    labels = ("//models/tests:mlp_test", "//models/benchmarks:resnet_latency")
    # --nocache_test_results: run them even where a developer's cache holds their passes
    first = kiln_test(REPO, SESSION_ENV, *labels, "--nocache_test_results")
    assert first.returncode == 0, first.stderr
    for label in labels:
        assert status(first.stderr, label).startswith("PASSED in "), first.stderr
    mlp = table(REPO / "kiln-testlogs/models/tests/mlp_test/test.log")
    assert mlp["top1"][1:] == ["0.9", ">=", "0.85", "-", "ok"]
    assert mlp["max_abs_error"][-1] == "ok" and mlp["cosine"][-1] == "ok"
    latency = (REPO / "kiln-testlogs/models/benchmarks/resnet_latency/test.log").read_text()
    assert "image=1x3x224x224" in latency and "image=4x3x224x224" in latency
    assert "p50 <= 10000 ms: ok" in latency
    again = kiln_test(REPO, SESSION_ENV, *labels)
    assert again.returncode == 0, again.stderr
    for label in labels:
        assert status(again.stderr, label).startswith("(cached) PASSED in "), again.stderr
    assert "Executed 0 out of 2 tests: 2 tests pass." in again.stderr


def test_the_timm_model_passes_on_its_labelled_images(library_examples: LibraryExamples) -> None:
    examples = library_examples
    find_links = f"--pip_find_links={examples.wheelhouse}"
    first = kiln_test(examples.root, examples.env, "//models/tests/...", find_links)
    assert first.returncode == 0, first.stderr
    assert status(first.stderr, "//models/tests:resnet_test").startswith("PASSED in ")
    log = examples.root / "kiln-testlogs/models/tests/resnet_test/test.log"
    assert "//models:resnet_pt2 over //models/tests:images (16 samples)" in log.read_text()
    rows = table(log)
    assert rows["top1"][1:] == ["0.875", ">=", "0.80", "-", "ok"]
    assert float(rows["max_abs_error"][1]) <= 1e-4
    again = kiln_test(examples.root, examples.env, "//models/tests/...", find_links)
    assert again.returncode == 0, again.stderr
    assert status(again.stderr, "//models/tests:resnet_test").startswith("(cached) PASSED")
