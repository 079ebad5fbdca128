"""`python -m kiln.pyenv.lock`: a lock resolved beside the toolchain, hashed and annotated."""

from __future__ import annotations

from pathlib import Path

import pytest
from kiln.pip_lock import parse
from kiln.pyenv import lock

from tests.wheels import make_wheel


def test_a_lock_pins_what_pip_would_install_beside_the_toolchain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    _, team = make_wheel(
        wheelhouse,
        "teamlib",
        "1.0",
        {"teamlib/__init__.py": ""},
        # numpy and torch are the toolchain's: never locked, never resolved again
        requires=("helperlib>=2", "numpy", "torch"),
    )
    _, helper = make_wheel(wheelhouse, "helperlib", "2.1", {"helperlib.py": ""})
    make_wheel(wheelhouse, "helperlib", "1.0", {"helperlib.py": ""})
    (tmp_path / "requirements.in").write_text("teamlib\n")
    out = tmp_path / "requirements_lock.txt"

    code = lock.main(
        [str(tmp_path / "requirements.in"), "-o", str(out), "--find-links", str(wheelhouse)]
    )

    assert code == 0, capsys.readouterr().err
    locked = parse(out.read_text(), "requirements_lock.txt")
    assert sorted(locked.packages) == ["helperlib", "teamlib"]
    assert locked.packages["helperlib"].hashes == helper.hashes
    assert locked.packages["helperlib"].required_by == ("teamlib",)
    assert locked.packages["teamlib"].hashes == team.hashes
    assert [p.name for p in locked.closure("teamlib")] == ["helperlib", "teamlib"]
    assert "Not locked, kiln's toolchain provides them: torch " in out.read_text()


def test_a_requirement_that_needs_another_torch_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    make_wheel(wheelhouse, "oldlib", "1.0", {"oldlib.py": ""}, requires=("torch<2",))
    (tmp_path / "requirements.in").write_text("oldlib\n")
    code = lock.main([str(tmp_path / "requirements.in"), "--find-links", str(wheelhouse)])
    err = capsys.readouterr().err
    assert code == 1
    assert "ERROR: pip could not resolve " in err
    assert "the toolchain's distributions (torch first) are pinned" in err
