"""`@pip//` deps under Bazel: the same BUILD files and lock as kiln's, the same bytes.

examples/libraries, as the session's kiln build left it (tests/e2e/library_examples.py:
kiln-out/ holds //models/...), is built again by Bazel in the same folder: its
WORKSPACE makes @pip with kiln_pip_repository from the lock, offline from the same
wheelhouse, and //models:vit_pt2 (the smallest timm model) must come out byte for
byte as kiln made it: the package, the validation report, the loaders, and its specs
but for the output root. One Bazel build of the model, one of the error cases (a
tqdm hash that is not its wheel's; a lock leaving tqdm out of timm's closure; a
package the lock does not pin): kiln's message for the first two is printed by both
tools; the third fails in Bazel's loading, before any of kiln's code runs, so Bazel
words it (it names the label and the BUILD file's line).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kiln.bazel.paths import as_kiln

from tests.bazel_workspace import REPO, Bazel, Result, ensure_bazel
from tests.e2e.bazel.test_bazel_conformance import ARTIFACTS, SPECS
from tests.e2e.library_examples import LibraryExamples

pytestmark = pytest.mark.torch

MODEL = "vit_pt2"
BAD = ("//bad:badhash_pt2", "//bad:unlocked_pt2", "//bad:nosuch_pt2")
# The bad locks' repositories (their hubs are in the copy's root BUILD file from the start).
WORKSPACE_EXTRA = """
# Test only: the error cases of tests/e2e/bazel/test_bazel_pip.py.
kiln_pip_repository(name = "pip_badhash", lock = "//:badhash_lock.txt", interpreter = "python")

kiln_pip_repository(name = "pip_unlocked", lock = "//:unlocked_lock.txt", interpreter = "python")
"""


@dataclass
class PipTwins:
    examples: LibraryExamples
    bazel: Bazel
    bin: Path
    built: Result
    failed: Result  # the error cases, --keep_going
    kiln_failed: subprocess.CompletedProcess[str]  # and kiln's build of them

    @property
    def kiln_out(self) -> Path:
        return self.examples.root / "kiln-out"

    @property
    def external(self) -> Path:
        """<output base>/external: bin is <output base>/execroot/<ws>/bazel-out/<cfg>/bin."""
        return self.bin.parents[4] / "external"


@pytest.fixture(scope="module")
def pip_twins(
    library_examples: LibraryExamples, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PipTwins]:
    ensure_bazel()
    base = tmp_path_factory.mktemp("bazel-pip")
    root = library_examples.root
    with (root / "WORKSPACE").open("a") as workspace:  # kiln reads only that it exists
        workspace.write(WORKSPACE_EXTRA)
    bazel = Bazel.at(root, base / "bazel-root", base / "bazel-home")
    bazel.env["KILN_PIP_FIND_LINKS"] = str(library_examples.wheelhouse)
    # @kiln is this checkout (the WORKSPACE's ../.. is the copy's parent); no bazel-*
    # links in the folder kiln builds in.
    flags = (f"--override_repository=kiln={REPO}", "--symlink_prefix=/")
    try:
        built = bazel.build(*flags, f"//models:{MODEL}")
        assert built.code == 0, f"bazel build failed:\n{built.err[-6000:]}"
        failed = bazel.build(*flags, "--keep_going", *BAD)
        bin_dir = Path(bazel.ok("info", *flags, "bazel-bin").out.strip())
        kiln_failed = library_examples.build("--keep_going", targets=BAD)
        assert kiln_failed.returncode == 1, kiln_failed.stderr
        yield PipTwins(library_examples, bazel, bin_dir, built, failed, kiln_failed)
    finally:
        bazel.shutdown()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_timm_model_is_byte_identical_from_both_tools(pip_twins: PipTwins) -> None:
    for pattern in ARTIFACTS:
        relative = f"models/{pattern.format(name=MODEL)}"
        kiln, bazel = pip_twins.kiln_out / relative, pip_twins.bin / relative
        assert _digest(kiln) == _digest(bazel), f"{relative} differs"
    for pattern in SPECS:
        relative = f"models/{pattern.format(name=MODEL)}"
        spec = (pip_twins.bin / relative).read_text()
        assert as_kiln(spec) == (pip_twins.kiln_out / relative).read_text(), relative
    export = json.loads((pip_twins.bin / f"models/{MODEL}.export.json").read_text())
    assert export["model"]["source"]["python_deps"] == ["@pip//timm:timm"]  # it declared timm


def test_the_repository_is_the_lock_installed_but_the_toolchain(pip_twins: PipTwins) -> None:
    external = pip_twins.external / "pip"
    assert (external / "timm/site/timm/__init__.py").is_file()
    assert (external / "torchvision/site/torchvision-0.28.0.dist-info").is_dir()
    assert not (external / "torch").exists()  # never from the lock: the toolchain's
    build = (external / "timm/BUILD.bazel").read_text()
    assert '"//huggingface_hub:site"' in build and '"//torchvision:site"' in build


def _from(text: str, start: str) -> str:
    """`text` from the line holding `start` (that line from `start` on) to its hint."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if start in line)
    end = next(i for i in range(first, len(lines)) if lines[i].startswith("  hint: "))
    return "\n".join([lines[first][lines[first].index(start) :], *lines[first + 1 : end + 1]])


@pytest.mark.parametrize(
    ("target", "start"),
    [
        ("//bad:badhash_pt2", "pip could not install tqdm==4.70.1"),
        ("//bad:unlocked_pt2", "the lock's closure is incomplete"),
    ],
)
def test_a_bad_lock_gets_kiln_s_message_from_both_tools(
    pip_twins: PipTwins, target: str, start: str
) -> None:
    kiln = pip_twins.kiln_failed.stderr
    assert f"TorchExport {target.removesuffix('_pt2')}_pt2 failed: " in kiln
    assert "Traceback (most recent call last)" not in kiln
    assert '.py", line' not in pip_twins.failed.err  # Bazel's is Starlark's, of the rule
    assert f"{target.removesuffix('_pt2')} depends on @pip_" in pip_twins.failed.err
    assert _from(pip_twins.failed.err, start) == _from(kiln, start)


def test_an_unlocked_package_fails_loading_under_both_tools(pip_twins: PipTwins) -> None:
    kiln = pip_twins.kiln_failed.stderr
    assert re.search(r"bad/BUILD:\d+:\d+: //bad:nosuch: .*no package 'timmm' in @pip", kiln)
    assert "did you mean '@pip//timm'?" in kiln
    bazel = pip_twins.failed.err
    assert re.search(r"bad/BUILD:\d+:\d+: no such package '@pip//timmm'", bazel), bazel[-3000:]


def test_nothing_of_a_failed_repository_is_kept(pip_twins: PipTwins) -> None:
    assert (pip_twins.external / "pip/WORKSPACE").is_file()  # where the good one is
    for name in ("pip_badhash", "pip_unlocked"):  # the second failed after installing
        folder = pip_twins.external / name
        assert not folder.exists() or not list(folder.iterdir()), name
