"""The checked-in Starlark of kiln's Bazel rules is what kiln.bazel.generate writes now.

A rule whose attributes, outputs or actions change (issue 16's weights join, issue
12's golden outputs) changes the catalogue; this test then fails until someone runs
`python -m kiln.bazel.generate` and commits the result with the rule.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kiln.bazel import generate
from kiln.rules import exported_rules


def test_checked_in_starlark_is_current() -> None:
    stale = generate.stale()
    assert not stale, (
        f"{', '.join(stale)} differ from what the rules give: run "
        "`.venv/bin/python -m kiln.bazel.generate` and commit the result"
    )


def test_check_mode_names_a_stale_file(tmp_path: Path) -> None:
    for path, text in generate.render().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert generate.stale(tmp_path) == []
    catalogue = tmp_path / "rules/private/catalogue.bzl"
    catalogue.write_text(catalogue.read_text().replace("{name}.pt2", "{name}.pt3", 1))
    assert generate.stale(tmp_path) == ["rules/private/catalogue.bzl"]


def test_the_command_checks_the_repository() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kiln.bazel.generate", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "")


def test_defs_bzl_exports_what_kilns_loader_answers_for_it() -> None:
    defs = generate.render()["rules/defs.bzl"]
    for name in exported_rules():
        assert f"\n{name} = _{name}\n" in defs
    assert "genrule" not in defs and "filegroup" not in defs


def test_output_is_starlark_not_json() -> None:
    assert generate.starlark([True, None, 1.5, "x"]) == '[True, None, 1.5, "x"]'
    nested = generate.starlark({"shapes": {"[]": {"actions": [{"gpu": False}]}}})
    assert nested.splitlines()[0] == "{" and "False" in nested
