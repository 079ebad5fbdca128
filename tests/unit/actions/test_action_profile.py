"""KILN_ACTION_PROFILE: an action run with it leaves its profile; without it, nothing."""

from __future__ import annotations

import pstats
from pathlib import Path

import pytest
from kiln.action_specs import Spec
from kiln.actions import spec as action_spec
from kiln.actions.action_profile import PROFILE_ENV


class _Tiny(Spec):
    word: str


def _busy_part(spec: _Tiny) -> None:
    assert spec.word == "ab"


def _run(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(_Tiny(word="ab").to_json())
    action_spec.run(_busy_part, _Tiny, [str(spec_file)])


def test_a_profiled_action_leaves_its_profile_and_a_readable_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "profiles"))
    _run(tmp_path)
    (profile,) = (tmp_path / "profiles").glob("_Tiny.*.prof")
    functions = {name for _, _, name in pstats.Stats(str(profile)).stats}  # type: ignore[attr-defined]
    assert "_busy_part" in functions
    summary = profile.with_suffix(".txt").read_text()
    assert summary.startswith("_Tiny: ") and "s wall in the action's main" in summary
    assert "_busy_part" in summary


def test_without_the_variable_an_action_writes_no_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    _run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]
