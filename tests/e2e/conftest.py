"""The e2e tests' session builds: the repository's own example packages, and
examples/libraries (the workspaces themselves come from tests/conftest.py: ws,
make_workspace)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.library_examples import LibraryExamples, build_examples

REPO = Path(__file__).resolve().parents[2]
# The environment before tests/conftest.py gives each test a fresh HOME: the
# session's kiln build of the repository's own workspace uses the default disk
# cache, so a developer's warm cache makes it a cache hit; a cold one (CI) builds.
SESSION_ENV = dict(os.environ)
# The example packages the loader tests (C++ and Python) run; mlp_sep_pt2 is mlp_pt2
# with weights = "separate".
EXAMPLES = (
    "//models:mlp_pt2",
    "//models:mlp_sep_pt2",
    "//models:resnet_pt2",
    "//models:tiny_lm_pt2",
)


@pytest.fixture(scope="session")
def repo_examples() -> Path:
    """kiln build of the repository's example packages with its own kiln, once a session
    (side by side: about a minute cold); their folder, kiln-out/models."""
    run = subprocess.run(
        [sys.executable, "-m", "kiln", "--nohome_rc", "build", *EXAMPLES],
        cwd=REPO,
        env=SESSION_ENV,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert run.returncode == 0, f"kiln build {' '.join(EXAMPLES)} failed:\n{run.stderr}"
    return REPO / "kiln-out" / "models"


@pytest.fixture(scope="session")
def library_examples(tmp_path_factory: pytest.TempPathFactory) -> LibraryExamples:
    """examples/libraries built by kiln once a session (tests/e2e/library_examples.py)."""
    return build_examples(tmp_path_factory.mktemp("examples"))
