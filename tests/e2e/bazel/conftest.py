"""One workspace, two tools: the repository built by `kiln build` and by `bazel build`.

The session copies the repository (BUILD files, rules, kiln's code, the offline
stubs) into a temporary folder, starts nginx as a remote cache, and builds
//models:mlp_pt2 and //models:resnet_pt2 there once with kiln and once with Bazel
(uploading to nginx). Every test of this folder reads those builds instead of
making its own: packaging ResNet-18 costs about 30 s a tool. Bazel's state lives
in the session's folder (--output_user_root); every server started is shut down
and nginx is stopped by its PID when the session ends.

kiln uses the disk cache of the environment the session started in (as
tests/e2e/test_cc_loader.py does), so a mlp it built there is a hit here too;
Bazel starts cold.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bazel_workspace import Bazel, Result, copy_repository, ensure_bazel
from tests.nginx_cache import NginxCache

TARGETS = ("//models:mlp_pt2", "//models:resnet_pt2")
SESSION_ENV = dict(os.environ)  # before tests/conftest.py gives each test its own HOME

# Packages only the tests add to the copy. bad/*: one target with a bad attribute each
# (kiln stops at the first error of a BUILD file). gpu: a CUDA package, analyzed only;
# gpu_platform (Bazel's own rule, so kiln skips it): an execution platform with a GPU.
TEST_PACKAGES = {
    "bad/mistyped/BUILD": """
        load("@kiln//rules:defs.bzl", "aoti_package")
        aoti_package(name = "p", model = "//models:mlp", rtol = "tight")
        """,
    "bad/unknown/BUILD": """
        load("@kiln//rules:defs.bzl", "aoti_package")
        aoti_package(name = "p", model = "//models:mlp", validat = False)
        """,
    "bad/literal/BUILD": """
        load("@kiln//rules:defs.bzl", "aoti_package")
        aoti_package(name = "p", model = "//models:mlp", device = "gpu")
        """,
    "bad/backend/BUILD": """
        load("@kiln//rules:defs.bzl", "aoti_package")
        aoti_package(name = "p", model = "//models:mlp", backend = "tensorrt")
        """,
    # A source file of the package itself: one of models/ would be refused by kiln as not
    # exported (not visible) before the model check, where Bazel 4.2.3 exports it implicitly.
    "bad/not_a_model/BUILD": """
        load("@kiln//rules:defs.bzl", "aoti_package")
        aoti_package(name = "p", model = "m.py")
        """,
    "bad/not_a_model/m.py": "",
    "bad/dims/BUILD": """
        load("@kiln//rules:defs.bzl", "aoti_package", "torch_model")
        torch_model(
            name = "m",
            src = "//models:mlp.py",
            factory = "mlp:build",
            inputs = [{"name": "x", "shape": [8, 10]}],
            dynamic_dims = [{"name": "batch", "min": 1, "max": 64, "axes": {"y": 0}}],
        )
        aoti_package(name = "p", model = ":m")
        """,
    "gpu/BUILD": """
        load("@kiln//rules:defs.bzl", "aoti_package")
        aoti_package(name = "mlp_cuda_pt2", model = "//models:mlp", device = "cuda")
        """,
    "gpu_platform/BUILD": """
        platform(
            name = "h200",
            parents = ["@local_config_platform//:host"],
            constraint_values = ["@kiln//bazel:cuda"],
            exec_properties = {
                "Pool": "gpu",
                "gpu_name": "NVIDIA H200",
                "compute_capability": "9.0",
            },
        )
        """,
}
BAD = sorted(
    p.removesuffix("/BUILD") for p in TEST_PACKAGES if p.startswith("bad/") and p.endswith("/BUILD")
)


@dataclass
class Twins:
    root: Path  # the repository's copy: one workspace for both tools
    base: Path  # the session's folder
    bazel: Bazel
    bazel_bin: Path
    nginx: NginxCache
    built: Result  # what the Bazel build printed

    @property
    def kiln_out(self) -> Path:
        return self.root / "kiln-out"

    def kiln(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return kiln(cwd or self.root, *args)


def kiln(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kiln ARGS` in `cwd`, with the session's environment (and so its disk cache)."""
    return subprocess.run(
        [sys.executable, "-m", "kiln", "--nohome_rc", *args],
        cwd=cwd,
        env=SESSION_ENV,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


@pytest.fixture(scope="session")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twins]:
    ensure_bazel()
    base = tmp_path_factory.mktemp("bazel")
    root = copy_repository(base / "kiln")
    for path, text in TEST_PACKAGES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text).lstrip())
    with (root / ".kilnignore").open("a") as ignore:
        ignore.write("gpu_platform\n")
    nginx = NginxCache.start(base / "nginx")
    bazel = Bazel.at(root, base / "bazel-root", base / "bazel-home")
    try:
        built_by_kiln = kiln(root, "build", *TARGETS)
        assert built_by_kiln.returncode == 0, f"kiln build failed:\n{built_by_kiln.stderr[-6000:]}"
        built = bazel.build(f"--remote_cache={nginx.url}", *TARGETS)
        assert built.code == 0, f"bazel build failed:\n{built.err[-6000:]}"
        yield Twins(root, base, bazel, bazel.bin, nginx, built)
    finally:
        bazel.shutdown()
        nginx.stop()
