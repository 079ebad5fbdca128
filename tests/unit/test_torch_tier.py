"""tests/torch_tier.py: the guard of the fast tier, on small test folders of its own.

Each case runs pytest in a child process, in a folder whose `torch` is a stub
module (importing it is what the guard watches for; the real torch stays out).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pytest_in(folder: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    (folder / "torch.py").write_text("LOADED = True\n")
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.torch_tier", "-p", "no:cacheprovider",
         "-q", "--rootdir", str(folder), "-c", "/dev/null", *args, str(folder)],
        cwd=folder,
        env={"PYTHONPATH": f"{folder}:{REPO}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip


def test_an_unmarked_test_that_imports_torch_fails_naming_the_mark(tmp_path: Path) -> None:
    run = pytest_in(
        tmp_path / "t",
        {
            "test_a.py": """
                import pytest

                def test_imports():
                    import torch

                @pytest.mark.torch
                def test_marked_imports_too():
                    import torch
                """
        },
    )
    assert run.returncode == 1, run.stdout
    assert (
        "test_a.py::test_imports imported torch into the test process (in its call) but is "
        "not marked `torch`"
    ) in run.stdout
    assert "1 failed, 1 passed" in run.stdout


def test_a_module_that_imports_torch_when_collected_fails_each_unmarked_test(
    tmp_path: Path,
) -> None:
    run = pytest_in(
        tmp_path / "t",
        {"test_b.py": "import torch\n\ndef test_one():\n    pass\n\ndef test_two():\n    pass\n"},
    )
    assert "2 failed" in run.stdout, run.stdout
    assert "(when its module was collected)" in run.stdout


def test_the_fast_tier_never_imports_a_torch_module(tmp_path: Path) -> None:
    """Its pytestmark deselects it, so it is not even collected: its torch never loads."""
    run = pytest_in(
        tmp_path / "t",
        {
            "test_c.py": """
                import pytest
                import torch

                pytestmark = pytest.mark.torch

                def test_needs_torch():
                    assert torch.LOADED
                """,
            "test_d.py": """
                import sys

                def test_plain():
                    assert "torch" not in sys.modules
                """,
        },
        "-m",
        "not torch",
    )
    assert run.returncode == 0, run.stdout
    assert "1 passed" in run.stdout and "failed" not in run.stdout
