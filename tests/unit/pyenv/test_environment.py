"""EnvironmentStore: the toolchain plus exactly a locked closure, made once, never half-used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kiln.action_graph import PythonPackage
from kiln.pyenv import pip
from kiln.pyenv.environment import MANIFEST, EnvironmentStore, PythonEnvError

from tests.wheels import make_wheel


def run(python: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd="/", check=False, env={}
    )


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    return tmp_path / "wheelhouse"


def store(tmp_path: Path, wheelhouse: Path, lines: list[str] | None = None) -> EnvironmentStore:
    report = lines.append if lines is not None else (lambda text: None)
    return EnvironmentStore(
        tmp_path / "envs", sys.executable, find_links=(str(wheelhouse),), report=report
    )


def test_the_toolchain_alone_holds_torch_and_kiln_but_nothing_else_of_the_machine(
    tmp_path: Path, wheelhouse: Path
) -> None:
    python = store(tmp_path, wheelhouse).python_for(())
    found = run(python, "import kiln.action_specs, pydantic, jinja2, safetensors; print('ok')")
    assert found.stdout == "ok\n", found.stderr
    assert (Path(python).parent.parent / "lib").is_dir()
    # pytest is installed beside kiln (its dev extra), and so importable here: not there.
    leaked = run(python, "import pytest")
    assert "No module named 'pytest'" in leaked.stderr
    assert run(python, "import torch.version; print(torch.version.__version__)").returncode == 0


def test_the_toolchain_is_imported_from_where_it_is_installed(
    tmp_path: Path, wheelhouse: Path
) -> None:
    """Not through the environment's symlinks: torch's __file__ gives inductor its -I
    flags, which end up in a package's bytes, so it must not depend on the output base."""
    import kiln
    import typing_extensions

    python = store(tmp_path, wheelhouse).python_for(())
    found = run(python, "import kiln, typing_extensions as t; print(kiln.__file__, t.__file__)")
    assert found.stdout.split() == [kiln.__file__, typing_extensions.__file__], found.stderr


def test_a_locked_package_is_installed_and_the_next_build_finds_it_by_a_stat(
    tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, teamlib = make_wheel(wheelhouse, "teamlib", "1.0", {"teamlib/__init__.py": "X = 1\n"})
    lines: list[str] = []
    python = store(tmp_path, wheelhouse, lines).python_for((teamlib,))
    assert run(python, "import teamlib; print(teamlib.X)").stdout == "1\n"
    assert lines[0].startswith("making the Python environment ")
    assert (
        "the toolchain and 1 locked package (teamlib 1.0); installing 1 with pip from" in lines[0]
    )
    assert lines[1] == "  [1/1] teamlib-1.0"
    assert lines[-1].startswith("Python environment ") and " ready in " in lines[-1]

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip ran for an environment that exists")

    monkeypatch.setattr(pip, "install", no_pip)
    assert store(tmp_path, wheelhouse).python_for((teamlib,)) == python


def test_each_closure_has_its_own_environment(tmp_path: Path, wheelhouse: Path) -> None:
    _, one = make_wheel(wheelhouse, "teamlib", "1.0", {"teamlib/__init__.py": "X = 1\n"})
    _, two = make_wheel(wheelhouse, "teamlib", "2.0", {"teamlib/__init__.py": "X = 2\n"})
    envs = store(tmp_path, wheelhouse)
    first, second = envs.python_for((one,)), envs.python_for((two,))
    assert first != second
    assert run(second, "import teamlib; print(teamlib.X)").stdout == "2\n"
    assert envs.python_for((one,)) == first
    assert run(envs.python_for(()), "import teamlib").returncode == 1


def test_a_package_pip_cannot_find_fails_naming_it_and_leaves_nothing(
    tmp_path: Path, wheelhouse: Path
) -> None:
    _, present = make_wheel(wheelhouse, "teamlib", "1.0", {"teamlib/__init__.py": ""})
    absent = PythonPackage("otherlib", "3.1", ("sha256:" + "0" * 64,))
    with pytest.raises(PythonEnvError) as caught:
        store(tmp_path, wheelhouse).python_for((present, absent))
    text = caught.value.format()
    assert text.startswith(
        "cannot make the Python environment of 2 locked packages (otherlib 3.1, teamlib 1.0): "
        "pip could not install otherlib==3.1:\n    ERROR: "
    ), text
    assert "otherlib==3.1" in text.split("\n", 1)[1]
    assert (
        f"hint: is otherlib==3.1's wheel for this platform in the wheelhouse {wheelhouse}" in text
    )
    assert not [p for p in (tmp_path / "envs").iterdir() if p.is_dir()]


def test_a_wheel_whose_hash_is_not_the_locks_is_refused(tmp_path: Path, wheelhouse: Path) -> None:
    _, teamlib = make_wheel(wheelhouse, "teamlib", "1.0", {"teamlib/__init__.py": ""})
    tampered = PythonPackage("teamlib", "1.0", ("sha256:" + "f" * 64,))
    with pytest.raises(PythonEnvError, match=r"(?s)pip could not install teamlib==1.0:.*HASHES"):
        store(tmp_path, wheelhouse).python_for((tampered,))
    assert teamlib.hashes != tampered.hashes


def test_an_unfinished_environment_is_never_used_but_made_again(
    tmp_path: Path, wheelhouse: Path
) -> None:
    _, teamlib = make_wheel(wheelhouse, "teamlib", "1.0", {"teamlib/__init__.py": "X = 1\n"})
    envs = store(tmp_path, wheelhouse)
    unfinished = tmp_path / "envs" / envs.digest((teamlib,))
    (unfinished / "lib").mkdir(parents=True)  # a crash mid-install: no manifest
    python = envs.python_for((teamlib,))
    assert (unfinished / MANIFEST).is_file()
    assert run(python, "import teamlib; print(teamlib.X)").stdout == "1\n"


def test_a_closure_missing_a_dependency_is_caught_when_the_environment_is_made(
    tmp_path: Path, wheelhouse: Path
) -> None:
    _, teamlib = make_wheel(
        wheelhouse, "teamlib", "1.0", {"teamlib/__init__.py": ""}, requires=("helperlib>=2",)
    )
    with pytest.raises(PythonEnvError) as caught:
        store(tmp_path, wheelhouse).python_for((teamlib,))
    assert caught.value.message == (
        "the lock's closure is incomplete: teamlib 1.0 requires helperlib, which it does not hold"
    )
    _, helper = make_wheel(wheelhouse, "helperlib", "1.5", {"helperlib.py": ""})
    with pytest.raises(PythonEnvError, match=r"requires helperlib>=2, but it holds helperlib 1\.5"):
        store(tmp_path, wheelhouse).python_for((teamlib, helper))


def test_a_lock_may_not_replace_a_toolchain_distribution(tmp_path: Path, wheelhouse: Path) -> None:
    import numpy

    old = PythonPackage("numpy", "1.0.0", ("sha256:" + "0" * 64,))
    with pytest.raises(PythonEnvError) as caught:
        store(tmp_path, wheelhouse).python_for((old,))
    assert caught.value.message == (
        f"the lock pins numpy==1.0.0, but the toolchain has numpy {numpy.__version__} "
        "(torch or kiln's actions use it)"
    )
    same = PythonPackage("numpy", numpy.__version__, ("sha256:" + "0" * 64,))
    python = store(tmp_path, wheelhouse).python_for((same,))  # linked, not installed
    assert run(python, "import numpy; print(numpy.__version__)").stdout.strip() == same.version
