"""examples/libraries/ built by kiln once a session: for its tests and for Bazel's.

The wheels come from tools/wheelhouse.sh (a wheelhouse filled once from the
lock, checked against its hashes, kept in .wheelhouse/ or $KILN_WHEELHOUSE),
so the builds make their environments offline. The session copies the
workspace and builds //models/... there with kiln, once: about a minute of
AOTInductor packaging. tests/e2e/test_models_from_libraries.py reads that build;
tests/e2e/bazel/test_bazel_pip.py builds one of its models again with Bazel in
the same copy and compares the bytes, so kiln's side costs nothing more.

The copy also holds, from the start, what the Bazel tests add (EXTRA_FILES: the
error cases' locks and package, never part of //models/...), so no test edits a
BUILD file kiln has loaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples/libraries"
KILN = [sys.executable, "-m", "kiln"]
LOCK = "requirements_lock.txt"
TQDM_HASH = "sha256:c293e525e6fef9c20e8728fd4612df02a0aa31bb5fe91ecd93e123b1b7bffa73"


def _bad_locks() -> dict[str, str]:
    """Two locks kiln and Bazel must refuse alike: one whose tqdm hash is not its wheel's,
    one whose annotations leave tqdm out of timm's closure (huggingface_hub needs it)."""
    lock = (EXAMPLES / LOCK).read_text()
    assert TQDM_HASH in lock, "the example lock's tqdm pin changed: update TQDM_HASH"
    badhash = lock.replace(TQDM_HASH, "sha256:" + "0" * 64)
    via = "    # via\n    #   huggingface_hub\n    #   transformers\n"
    assert via in lock.split("tqdm==", 1)[1], "the example lock's tqdm annotation changed"
    head, tail = lock.split("tqdm==", 1)
    unlocked = head + "tqdm==" + tail.replace(via, "    # via transformers\n", 1)
    return {"badhash_lock.txt": badhash, "unlocked_lock.txt": unlocked}


# The Bazel error cases (tests/e2e/bazel/test_bazel_pip.py): a hub per bad lock in the
# root BUILD file, and a package of targets that use them.
ROOT_BUILD_EXTRA = """
# Test only: locks kiln and Bazel refuse alike (tests/e2e/bazel/test_bazel_pip.py).
python_requirements(name = "pip_badhash", lock = "badhash_lock.txt")

python_requirements(name = "pip_unlocked", lock = "unlocked_lock.txt")
"""
BAD_BUILD = """
load("@kiln//rules:defs.bzl", "aoti_package", "torch_model")

torch_model(
    name = "badhash",
    src = "timm_models.py",
    factory = "timm_models:resnet",
    deps = ["@pip_badhash//timm"],
    inputs = [{"name": "image", "shape": [2, 3, 32, 32], "dtype": "float32"}],
)

aoti_package(name = "badhash_pt2", model = ":badhash")

torch_model(
    name = "unlocked",
    src = "timm_models.py",
    factory = "timm_models:resnet",
    deps = ["@pip_unlocked//timm"],
    inputs = [{"name": "image", "shape": [2, 3, 32, 32], "dtype": "float32"}],
)

aoti_package(name = "unlocked_pt2", model = ":unlocked")

torch_model(
    name = "nosuch",
    src = "timm_models.py",
    factory = "timm_models:resnet",
    deps = ["@pip//timmm"],
    inputs = [{"name": "image", "shape": [2, 3, 32, 32], "dtype": "float32"}],
)

aoti_package(name = "nosuch_pt2", model = ":nosuch")
"""


@dataclass
class LibraryExamples:
    root: Path
    wheelhouse: Path
    env: dict[str, str]
    first: subprocess.CompletedProcess[str]

    def build(
        self, *args: str, targets: tuple[str, ...] = ("//models/...",)
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*KILN, "build", *targets, f"--pip_find_links={self.wheelhouse}", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )


def wheelhouse() -> Path:
    found = Path(os.environ.get("KILN_WHEELHOUSE", REPO / ".wheelhouse"))
    subprocess.run(
        [REPO / "tools/wheelhouse.sh", EXAMPLES / LOCK, found],
        check=True,
        env=dict(os.environ, KILN_PYTHON=sys.executable),
    )
    return found


def build_examples(base: Path) -> LibraryExamples:
    """examples/libraries copied under `base` (with EXTRA files) and built by kiln."""
    root = base / "examples"
    shutil.copytree(EXAMPLES, root, ignore=shutil.ignore_patterns("kiln-out"))
    for name, text in _bad_locks().items():
        (root / name).write_text(text)
    with (root / "BUILD").open("a") as build:
        build.write(ROOT_BUILD_EXTRA)
    (root / "bad").mkdir()
    (root / "bad/BUILD").write_text(textwrap.dedent(BAD_BUILD).lstrip())
    shutil.copy(root / "models/timm_models.py", root / "bad/timm_models.py")
    env = dict(os.environ, XDG_CACHE_HOME=str(base / "cache"), HOME=str(base))
    workspace = LibraryExamples(root, wheelhouse(), env, subprocess.CompletedProcess([], 0))
    workspace.first = workspace.build()
    assert workspace.first.returncode == 0, workspace.first.stderr
    return workspace
