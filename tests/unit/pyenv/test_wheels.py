"""WheelStore: the wheels remote nodes install, downloaded once by pip, checked against the lock."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from kiln.pyenv import pip
from kiln.pyenv.environment import PythonEnvError
from kiln.pyenv.wheels import WheelStore

from tests.wheels import make_wheel


def _store(tmp_path: Path, lines: list[str] | None = None) -> WheelStore:
    report = lines.append if lines is not None else (lambda text: None)
    wheelhouse = str(tmp_path / "wheelhouse")
    return WheelStore(tmp_path / "wheels", sys.executable, find_links=(wheelhouse,), report=report)


def _no_pip(*args: object, **kwargs: object) -> None:
    raise AssertionError("pip ran for a wheel the store has")


def test_a_wheel_is_downloaded_once_under_its_hash_read_only_then_found_by_the_next_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, teamlib = make_wheel(tmp_path / "wheelhouse", "teamlib", "1.0", {"teamlib/x.py": ""})
    lines: list[str] = []
    (wheel,) = _store(tmp_path, lines).wheels([teamlib])
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    assert teamlib.hashes == (f"sha256:{sha}",)
    assert wheel.path == tmp_path / "wheels" / sha / "teamlib-1.0-py3-none-any.whl"
    assert wheel.path.read_bytes() == source.read_bytes()
    assert wheel.path.stat().st_mode & 0o222 == 0
    assert lines[0] == (
        f"downloading 1 wheel for the remote executor's nodes from {tmp_path / 'wheelhouse'}: "
        "teamlib 1.0"
    )
    monkeypatch.setattr(pip, "download", _no_pip)
    assert _store(tmp_path).wheels([teamlib]) == [wheel]


def test_a_wheel_whose_bytes_are_not_the_locks_is_refused_and_nothing_is_kept(
    tmp_path: Path,
) -> None:
    make_wheel(tmp_path / "wheelhouse", "teamlib", "1.0", {"teamlib/x.py": "A = 1"})
    _, locked = make_wheel(tmp_path / "elsewhere", "teamlib", "1.0", {"teamlib/x.py": "A = 2"})
    with pytest.raises(PythonEnvError) as refused:
        _store(tmp_path).wheels([locked])
    assert refused.value.message.startswith(
        "cannot fetch the wheels a remote node installs: pip could not download teamlib==1.0:\n"
    )
    assert "DO NOT MATCH THE HASHES" in refused.value.message
    assert [p.name for p in (tmp_path / "wheels").iterdir()] == [".lock"]


def test_a_kept_wheel_that_no_longer_matches_its_hash_is_downloaded_again(
    tmp_path: Path,
) -> None:
    source, teamlib = make_wheel(tmp_path / "wheelhouse", "teamlib", "1.0", {"teamlib/x.py": ""})
    (wheel,) = _store(tmp_path).wheels([teamlib])
    wheel.path.chmod(0o644)
    wheel.path.write_bytes(b"edited in place")
    (again,) = _store(tmp_path).wheels([teamlib])  # a new build checks it once more
    assert again.path.read_bytes() == source.read_bytes()
