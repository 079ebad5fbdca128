"""C++ with Bazel: the example app over `<name>_cc`, and kiln's loader file from kiln-out.

examples/bazel_app is a workspace of its own that takes kiln's repository with
`local_repository(name = "kiln", ...)`: it packages a model with kiln's rules,
links the generated loader (`//models:tiny_pt2_cc`) and libtorch
(libtorch_repository over the torch wheel) into a cc_binary, which finds the
package in its runfiles, runs it at the smallest and largest batch and prints
the loader's refusal of one more. `bazel test` runs it too, offline.

A workspace that knows nothing of kiln's rules uses what `kiln build` wrote:
`new_local_repository` over kiln-out/models with the loader's
`mlp_pt2.BUILD.bazel` as build_file, and tests/cc/model_app.cpp linked to it.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bazel_workspace import REPO, Bazel
from tests.e2e.bazel.conftest import Twins, kiln

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def example(twins: Twins) -> Iterator[Bazel]:
    root = twins.root / "examples" / "bazel_app"
    bazel = Bazel.at(root, twins.base / "example-root", twins.base / "example-home")
    # As its README says to run it: no KILN_PYTHON, so WORKSPACE's relative interpreter
    # ../../.venv/bin/python is used (issue 20: it failed without a root BUILD file, and
    # KILN_PYTHON had hidden that). The copy's .venv is this session's, by a link.
    del bazel.env["KILN_PYTHON"]
    venv = twins.root / ".venv"
    if not venv.exists():
        venv.symlink_to(Path(sys.prefix), target_is_directory=True)
    try:
        bazel.ok("build", "//app")
        yield bazel
    finally:
        bazel.shutdown()


def test_example_app_runs_the_package_and_shows_the_loaders_refusal(example: Bazel) -> None:
    app = example.bin / "app" / "app"
    run = subprocess.run([str(app)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "batch 1: output 1 x 3",
        "batch 16: output 16 x 3",
        "batch 17: refused: TinyPt2: input 'features' dim 0 is 17, outside [1, 16] "
        "(the dynamic dim 'batch')",
    ]


def test_example_app_test_passes_under_bazel_test(example: Bazel) -> None:
    run = example("test", "--color=no", "--curses=no", "//app:app_test")
    assert run.code == 0, run.err[-4000:] + run.out[-2000:]
    assert "//app:app_test" in run.out + run.err
    assert "PASSED" in run.out + run.err


def test_kiln_reads_the_examples_models_too(twins: Twins) -> None:
    run = kiln(twins.root / "examples" / "bazel_app", "query", "--output=label_kind", "//...")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "torch_model rule //models:tiny",
        "aoti_package rule //models:tiny_pt2",
    ]


# -- kiln's BUILD file for Bazel users of kiln-out ----------------------------------------


def _torch() -> Path:
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


@pytest.fixture(scope="module")
def consumer(twins: Twins) -> Iterator[Bazel]:
    """A Bazel workspace over kiln-out: no kiln rules, the loader's BUILD file as is."""
    root = twins.base / "consumer"
    root.mkdir()
    stubs = twins.root / "bazel" / "stubs"
    models = twins.kiln_out / "models"
    libs = ", ".join(f'"lib/{n}"' for n in ("libtorch.so", "libtorch_cpu.so", "libc10.so"))
    (root / "WORKSPACE").write_text(
        textwrap.dedent(
            f"""\
            workspace(name = "consumer")
            local_repository(name = "rules_cc", path = "{stubs}/rules_cc")
            local_repository(name = "rules_java", path = "{stubs}/rules_java")
            local_repository(name = "remote_coverage_tools", path = "{stubs}/remote_coverage_tools")
            new_local_repository(
                name = "mlp_pt2",
                path = "{models}",
                build_file = "{models}/mlp_pt2_loader/mlp_pt2.BUILD.bazel",
            )
            new_local_repository(
                name = "libtorch",
                path = "{_torch()}",
                build_file_content = \"\"\"
            cc_library(
                name = "torch",
                srcs = [{libs}, "lib/libgomp.so.1"],
                hdrs = glob(["include/**"]),
                includes = ["include", "include/torch/csrc/api/include"],
                defines = ["_GLIBCXX_USE_CXX11_ABI=1"],
                visibility = ["//visibility:public"],
            )
            \"\"\",
            )
            """
        )
    )
    (root / "BUILD").write_text(
        'cc_binary(name = "model_app", srcs = ["model_app.cpp"], copts = ["-std=c++20"], '
        'deps = ["@mlp_pt2//:mlp_pt2"])\n'
    )
    shutil.copy(REPO / "tests" / "cc" / "model_app.cpp", root / "model_app.cpp")
    (root / ".bazelrc").write_text((REPO / ".bazelrc").read_text())
    bazel = Bazel.at(root, twins.base / "consumer-root", twins.base / "consumer-home")
    try:
        bazel.ok("build", "//:model_app")
        yield bazel
    finally:
        bazel.shutdown()


def test_loader_build_file_serves_a_plain_bazel_workspace(consumer: Bazel) -> None:
    app = consumer.bin / "model_app"
    package = consumer.bin / "model_app.runfiles" / "mlp_pt2" / "mlp_pt2.pt2"  # its data
    assert package.is_file()
    ok = subprocess.run([str(app), str(package), "4"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.split()) == 4 * 4  # mlp: 10 -> 4 per row
    past = subprocess.run(
        [str(app), str(package), "65"], capture_output=True, text=True, check=False
    )
    assert past.returncode == 2
    assert "MlpPt2: input 'x' dim 0 is 65, outside [1, 64]" in past.stderr
