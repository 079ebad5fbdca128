"""KILN_ACTION_PROFILE: an action run with it ends its output with its profile; without
it, with nothing."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from kiln.action_specs import Spec
from kiln.actions import spec as action_spec
from kiln.actions.action_profile import PROFILE_ENV, profiled


class _Tiny(Spec):
    word: str


def _busy_part(spec: _Tiny) -> None:
    assert spec.word == "ab"


def _run(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(_Tiny(word="ab").to_json())
    action_spec.run(_busy_part, _Tiny, [str(spec_file)])


def test_a_profiled_action_prints_its_main_time_and_top_functions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROFILE_ENV, "1")
    _run(tmp_path)
    out = capsys.readouterr().out
    assert out.startswith("kiln-action-profile _Tiny: ")
    assert "s wall in the action's main" in out
    assert "_busy_part" in out and "cumulative" in out


def test_without_the_variable_an_action_prints_no_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    _run(tmp_path)
    assert capsys.readouterr().out == ""


def test_a_profiled_action_nested_in_another_prints_one_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROFILE_ENV, "1")
    with profiled("Outer"):
        _run(tmp_path)
    out = capsys.readouterr().out
    assert out.count("kiln-action-profile ") == 1 and "Outer" in out


def test_a_child_forked_during_a_profile_profiles_its_own_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AotiValidate runs its checks in a forked child, which inherits the parent's enabled
    profiler: a second one would fail with 'Another profiling tool is already active'."""
    monkeypatch.setenv(PROFILE_ENV, "1")
    report = tmp_path / "child.out"
    with profiled("Parent"):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - ends in os._exit
            code = 0
            try:
                with open(report, "w") as out, contextlib.redirect_stdout(out):
                    _run(tmp_path)
            except BaseException:  # reported through the exit status
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report.read_text().startswith("kiln-action-profile _Tiny: ")
