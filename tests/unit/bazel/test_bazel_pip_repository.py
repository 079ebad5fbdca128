"""kiln.bazel.pip_repository: Bazel's @pip made from a lock with kiln's own installs and checks.

The repository rule (kiln_pip_repository) runs `main` with the toolchain's
interpreter; here it runs in-process on wheels made on the spot (tests/wheels.py),
offline. The e2e test (tests/e2e/bazel/test_bazel_pip.py) runs it under Bazel.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kiln.action_graph import PythonPackage
from kiln.bazel import pip_repository

from tests.wheels import make_wheel


def _lock(root: Path, packages: dict[str, tuple[PythonPackage, tuple[str, ...]]]) -> None:
    lines = []
    for package, via in packages.values():
        lines.append(f"{package.name}=={package.version} --hash={package.hashes[0]}")
        lines += [f"    # via {parent}" for parent in via]
    (root / "requirements_lock.txt").write_text("\n".join(lines) + "\n")


def _make(root: Path, wheelhouse: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = ["--name", "pip", "--root", str(root), "--lock", "requirements_lock.txt"]
    argv += ["--out", str(root / "repo"), "--find-links", str(wheelhouse)]
    code = pip_repository.main(argv)
    return code, capsys.readouterr().err


def test_each_locked_distribution_gets_its_site_and_a_python_requirement_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheels = tmp_path / "wheels"
    files = {"teamlib/__init__.py": ""}
    _, team = make_wheel(wheels, "teamlib", "1.0", files, requires=("helper",))
    _, helper = make_wheel(wheels, "helper", "2.0", {"helper.py": "X = 1"})
    _lock(tmp_path, {"teamlib": (team, ()), "helper": (helper, ("teamlib",))})
    code, err = _make(tmp_path, wheels, capsys)
    assert code == 0, err
    repo = tmp_path / "repo"
    assert (repo / "teamlib/site/teamlib/__init__.py").is_file()
    assert (repo / "helper/site/helper.py").read_text() == "X = 1"
    assert not (repo / "teamlib/site/helper.py").exists()  # each distribution its own site
    assert not (repo / ".staging").exists()
    build = (repo / "teamlib/BUILD.bazel").read_text()
    assert 'hub = "@//:pip"' in build
    assert 'sites = ["//helper:site", "//teamlib:site"]' in build  # its locked closure
    assert '\\"line\\": 1' in build and team.hashes[0] in build  # kiln's attributes
    assert (repo / "WORKSPACE").read_text() == 'workspace(name = "pip")\n'


def test_a_hash_that_is_not_the_wheels_is_kilns_pip_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "teamlib", "1.0", {"teamlib/__init__.py": ""})
    wrong = PythonPackage("teamlib", "1.0", ("sha256:" + "0" * 64,))
    _lock(tmp_path, {"teamlib": (wrong, ())})
    code, err = _make(tmp_path, wheels, capsys)
    assert code == 1
    assert err.startswith(
        "ERROR: cannot make the repository @pip from requirements_lock.txt: "
        "pip could not install teamlib==1.0:"
    )
    assert "hint: is teamlib==1.0's wheel for this platform in the wheelhouse" in err
    assert not (tmp_path / "repo/teamlib/BUILD.bazel").exists()
    assert not (tmp_path / "repo/.staging").exists()


def test_a_closure_missing_a_requirement_is_refused_as_kiln_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheels = tmp_path / "wheels"
    files = {"teamlib/__init__.py": ""}
    _, team = make_wheel(wheels, "teamlib", "1.0", files, requires=("helper",))
    _, helper = make_wheel(wheels, "helper", "2.0", {"helper.py": ""})
    _lock(tmp_path, {"teamlib": (team, ()), "helper": (helper, ())})  # no `# via teamlib`
    code, err = _make(tmp_path, wheels, capsys)
    assert code == 1
    assert err.startswith(
        "ERROR: the lock's closure is incomplete: teamlib 1.0 requires helper, "
        "which it does not hold\n  hint: a package's closure is what the lock's '# via'"
    )
    assert not list((tmp_path / "repo").iterdir())  # no site of a refused lock is kept


def test_the_toolchain_is_never_installed_from_the_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = PythonPackage("torch", "1.0.0", ("sha256:" + "0" * 64,))
    _lock(tmp_path, {"torch": (torch, ())})
    code, err = _make(tmp_path, tmp_path / "wheels", capsys)
    assert code == 1
    assert "the lock pins torch==1.0.0, but the toolchain has torch 2.13.0" in err


def test_a_bad_lock_line_is_refused_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "requirements_lock.txt").write_text("timm>=1.0\n")
    code, err = _make(tmp_path, tmp_path / "wheels", capsys)
    assert code == 1
    assert err.startswith("ERROR: requirements_lock.txt:1")
    assert "Traceback" not in err


def test_a_package_that_would_shadow_torch_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheels = tmp_path / "wheels"
    _, fake = make_wheel(wheels, "nottorch", "1.0", {"torch/__init__.py": ""})
    _lock(tmp_path, {"nottorch": (fake, ())})
    code, err = _make(tmp_path, wheels, capsys)
    assert code == 1
    assert "a locked package installs 'torch', which the toolchain's torch provides" in err
