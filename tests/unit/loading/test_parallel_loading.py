"""Parallel evaluation (loading/parallel.py) is only a head start: the packages and
the errors are those of a serial run, whichever process met them first."""

from __future__ import annotations

import os

import pytest
from kiln.errors import KilnError
from kiln.loading import parallel, patterns

from tests.kiln_workspace import MakeWorkspace, Workspace

PACKAGES = 12


def _files(broken: tuple[int, ...] = ()) -> dict[str, str]:
    files = {
        "tools/BUILD": "",
        "tools/defs.bzl": "def group(name):\n    native.filegroup(name = name)\n",
    }
    for i in range(PACKAGES):
        bad = ", bogus = 1" if i in broken else ""
        other = ', "//p00:in.txt"' if i else ""
        files[f"p{i:02d}/BUILD"] = f"""\
            load("//tools:defs.bzl", "group")
            group(name = "g")
            genrule(name = "gen", srcs = glob(["*.txt"]), outs = ["o"], cmd = "cat $<"{bad})
            filegroup(name = "fg", srcs = [":gen", "in.txt"{other}])
            """
        files[f"p{i:02d}/in.txt"] = f"{i}\n"
    return files


def _expand(ws: Workspace, *, jobs: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    forks = []
    fork = os.fork
    monkeypatch.setattr(parallel, "jobs_for", lambda count: jobs)
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or fork())
    loader = ws.loader()
    labels = patterns.expand(loader, patterns.parse_patterns(["//...:*"], ""))
    assert len(forks) == jobs - 1
    assert loader.evaluated == PACKAGES + 1  # every package evaluated once, tools included
    return labels


def test_parallel_loading_yields_the_serial_packages(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    serial = make_workspace(_files())
    forked = make_workspace(_files())
    assert _expand(forked, jobs=3, monkeypatch=monkeypatch) == _expand(
        serial, jobs=1, monkeypatch=monkeypatch
    )
    # The packages themselves, stamps and all, are the same whoever evaluated them.
    serial_loader, forked_loader = serial.loader(), forked.loader()
    for name in serial_loader.packages_beneath(""):
        ours, theirs = serial_loader.package(name), forked_loader.package(name)
        assert ours.targets == theirs.targets and ours.files == theirs.files
        assert [s.path for s in ours.stamps] == [s.path for s in theirs.stamps]


def test_parallel_loading_reports_the_first_error_in_serial_order(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With 3 processes, p04 is in a child's share and p09 in the parent's.
    messages = []
    for jobs in (1, 3):
        ws = make_workspace(_files(broken=(4, 9)))
        monkeypatch.setattr(parallel, "jobs_for", lambda count, jobs=jobs: jobs)
        with pytest.raises(KilnError) as raised:
            patterns.expand(ws.loader(), patterns.parse_patterns(["//..."], ""))
        messages.append(raised.value.format())
    assert messages[0] == messages[1]
    assert "p04/BUILD" in messages[0] and "bogus" in messages[0]
