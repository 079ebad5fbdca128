"""The graph cache: BUILD files are evaluated again only when a file they depend on changed.

Each `_run` is what one `kiln query //...` does: a fresh PackageLoader on the
same cache file, every package under //... loaded, the cache saved.

The runs here follow their edits within milliseconds, which FileStamp counts
as racily clean (nothing would be cached): `fine_clock` stands for a file
system whose clock ticks finer than that. The racy cases have their tests.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import time
from pathlib import Path

import pytest
from kiln import code_digest
from kiln.code_digest import KILN_ROOT, CodeStamp
from kiln.label import TargetPattern
from kiln.loading import glob, package, patterns
from kiln.loading.graph_cache import LOADING_CODE

from tests.kiln_workspace import MakeWorkspace, Workspace

FILES = {
    "tools/BUILD": "",
    "tools/macros.bzl": """\
        load("//tools:names.bzl", "suffix")

        def group(name, srcs):
            native.filegroup(name = name + suffix(), srcs = srcs)
        """,
    "tools/names.bzl": 'def suffix():\n    return "_grp"\n',
    "app/BUILD": """\
        load("//tools:macros.bzl", "group")

        group(name = "py", srcs = glob(["**/*.py"]))
        """,
    "app/a.py": "",
    "lib/BUILD": 'filegroup(name = "lib", srcs = ["lib.txt"])\n',
    "lib/lib.txt": "",
    "other/BUILD": 'filegroup(name = "other")\n',
}


class Run:
    def __init__(self, ws: Workspace) -> None:
        loader = ws.loader()
        labels = patterns.expand(loader, [TargetPattern.parse("//...")])
        loader.save()
        self.evaluated = loader.evaluated
        self.labels = labels
        self.packages = {name: loader.package(name) for name in loader.packages}


@pytest.fixture(autouse=True)
def fine_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(package, "RACY_NS", 0)


@pytest.fixture
def ws(make_workspace: MakeWorkspace) -> Workspace:
    workspace = make_workspace(FILES)
    assert Run(workspace).evaluated == 4
    return workspace


def _edit(ws: Workspace, path: str, text: str) -> None:
    """Rewrite a file, and make sure its stat data changes even on a coarse clock."""
    target = ws.root / path
    before = target.stat() if target.exists() else None
    ws.write(path, text)
    if before is not None:
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def test_second_run_evaluates_nothing(ws: Workspace) -> None:
    run = Run(ws)
    assert run.evaluated == 0
    assert run.labels == ["//app:py_grp", "//lib:lib", "//other:other"]


def test_warm_cli_query_evaluates_nothing(ws: Workspace) -> None:
    assert ws.query("//...") == ["//app:py_grp", "//lib:lib", "//other:other"]
    assert Run(ws).evaluated == 0


def test_touching_a_build_file_reevaluates_only_its_package(ws: Workspace) -> None:
    path = ws.root / "other/BUILD"
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert Run(ws).evaluated == 1
    assert Run(ws).evaluated == 0


def test_editing_a_build_file_gives_the_new_targets(ws: Workspace) -> None:
    _edit(ws, "other/BUILD", 'filegroup(name = "renamed")\n')
    run = Run(ws)
    assert run.evaluated == 1
    assert run.labels == ["//app:py_grp", "//lib:lib", "//other:renamed"]


def test_editing_a_loaded_bzl_reevaluates_the_packages_that_load_it(
    ws: Workspace,
) -> None:
    _edit(
        ws, "tools/names.bzl", 'def suffix():\n    return "_files"\n'
    )  # loaded through macros.bzl
    run = Run(ws)
    assert run.evaluated == 1
    assert run.labels == ["//app:py_files", "//lib:lib", "//other:other"]


def test_adding_a_file_a_glob_matches_reevaluates_its_package(ws: Workspace) -> None:
    ws.write("app/deep/er/b.py", "")
    run = Run(ws)
    assert run.evaluated == 1
    assert run.packages["app"].targets["py_grp"].attrs["srcs"] == [
        "//app:a.py",
        "//app:deep/er/b.py",
    ]
    assert Run(ws).evaluated == 0


def test_removing_a_globbed_file_reevaluates_its_package(ws: Workspace) -> None:
    (ws.root / "app/a.py").unlink()
    run = Run(ws)
    assert run.evaluated == 1
    assert run.packages["app"].targets["py_grp"].attrs["srcs"] == []


def test_editing_a_source_file_reevaluates_nothing(ws: Workspace) -> None:
    _edit(ws, "lib/lib.txt", "new contents")
    _edit(ws, "app/a.py", "print('new')")
    assert Run(ws).evaluated == 0


def test_a_new_file_in_a_package_without_glob_reevaluates_nothing(ws: Workspace) -> None:
    ws.write("other/notes.md", "")
    assert Run(ws).evaluated == 0


def test_new_package_is_found_and_evaluated_alone(ws: Workspace) -> None:
    ws.write("new/pkg/BUILD", 'filegroup(name = "n")\n')
    run = Run(ws)
    assert run.evaluated == 1
    assert "//new/pkg:n" in run.labels


def test_deleted_package_disappears(ws: Workspace) -> None:
    (ws.root / "other/BUILD").unlink()
    run = Run(ws)
    assert run.evaluated == 0
    assert run.labels == ["//app:py_grp", "//lib:lib"]


def test_subpackage_appearing_takes_its_files_from_the_parent_glob(
    ws: Workspace,
) -> None:
    ws.write("app/deep/c.py", "")
    assert Run(ws).evaluated == 1
    ws.write("app/deep/BUILD", "")
    run = Run(ws)
    assert run.evaluated == 2  # app (its glob changes) and the new app/deep
    assert run.packages["app"].targets["py_grp"].attrs["srcs"] == ["//app:a.py"]


def test_kilnignore_change_is_seen(ws: Workspace) -> None:
    ws.write(".kilnignore", "# nothing yet\n")
    assert Run(ws).labels == ["//app:py_grp", "//lib:lib", "//other:other"]
    _edit(ws, ".kilnignore", "other\n")
    assert Run(ws).labels == ["//app:py_grp", "//lib:lib"]


def test_cache_written_by_other_kiln_code_is_not_used(ws: Workspace) -> None:
    data = pickle.loads(ws.graph_cache_file.read_bytes())
    code: CodeStamp = data["code"]
    # One of the files the loading code is made of, as it was before an edit.
    (path, *_), *rest = code.stats
    older = CodeStamp(code.roots, ((path, 1, 1, 1, 1), *rest))
    ws.graph_cache_file.write_bytes(pickle.dumps({**data, "code": older}))
    assert Run(ws).evaluated == 4


def test_cache_is_stamped_by_every_module_loading_imports() -> None:
    files = {str(p.relative_to(KILN_ROOT)) for p in code_digest.files(LOADING_CODE)}
    # BUILD evaluation, the rule catalogue, and what they import (attribute schemas,
    # the spec records torch_model's attributes are) — nothing hand-listed.
    assert {"loading/build_file.py", "rules/model/torch_model.py", "action_specs.py"} <= files
    assert {"rule_api/attrs.py", "loading/package_builder.py", "label.py"} <= files
    assert "cli/build.py" not in files


def test_every_truncation_of_the_cache_file_is_survived(ws: Workspace) -> None:
    path = ws.graph_cache_file
    data = path.read_bytes()
    assert pickle.loads(data)  # a whole file reads back
    step = max(1, len(data) // 200)
    for size in [*range(0, len(data), step), len(data) - 1]:
        path.write_bytes(data[:size])
        run = Run(ws)
        assert run.evaluated == 4, f"truncated to {size} bytes"
        assert run.labels == ["//app:py_grp", "//lib:lib", "//other:other"]
        assert path.read_bytes() != data[:size]  # rewritten whole


def test_garbage_in_the_cache_file_is_survived(ws: Workspace) -> None:
    ws.graph_cache_file.write_bytes(b"not a pickle at all")
    assert Run(ws).evaluated == 4
    ws.graph_cache_file.write_bytes(pickle.dumps({"format": "x"}))
    assert Run(ws).evaluated == 4


def test_source_file_deleted_or_added_after_caching_is_noticed(ws: Workspace) -> None:
    assert ws.query("deps(//lib)") == ["//lib:lib", "//lib:lib.txt"]
    (ws.root / "lib/lib.txt").unlink()
    missing = ws.kiln("query", "deps(//lib)")
    assert missing.code == 1
    assert "missing input file '//lib:lib.txt'" in missing.err
    ws.write("lib/lib.txt", "")
    assert ws.query("deps(//lib)") == ["//lib:lib", "//lib:lib.txt"]


def test_source_file_becoming_a_subpackage_file_is_noticed(ws: Workspace) -> None:
    ws.write("lib/BUILD", 'filegroup(name = "lib", srcs = ["d/x.txt"])\n')
    ws.write("lib/d/x.txt", "")
    assert ws.query("deps(//lib)") == ["//lib:d/x.txt", "//lib:lib"]
    ws.write("lib/d/BUILD", "")
    crossing = ws.kiln("query", "deps(//lib)")
    assert crossing.code == 1
    assert "'d/x.txt' crosses into package 'lib/d'" in crossing.err


def test_kilnignore_change_reevaluates_packages_that_glob(ws: Workspace) -> None:
    ws.write("app/gen/x.py", "")
    ws.write(".kilnignore", "# nothing yet\n")
    assert Run(ws).packages["app"].targets["py_grp"].attrs["srcs"] == [
        "//app:a.py",
        "//app:gen/x.py",
    ]
    _edit(ws, ".kilnignore", "app/gen\n")
    run = Run(ws)
    assert run.evaluated == 1  # app globs; lib and other do not
    assert run.packages["app"].targets["py_grp"].attrs["srcs"] == ["//app:a.py"]


def test_errors_from_a_warm_cache_carry_the_same_location(ws: Workspace) -> None:
    ws.write(
        "tools/grp.bzl",
        """\
                def grp(name, srcs):
                    native.filegroup(name = name, srcs = srcs)
                """,
    )
    ws.write(
        "bad/BUILD",
        """\
                load("//tools:grp.bzl", "grp")

                grp(name = "b", srcs = ["//gone:x"])
                """,
    )
    cold = ws.kiln("query", "//bad:b")
    assert ws.loader().package("bad")  # cached: the BUILD file itself is fine
    warm = ws.kiln("query", "//bad:b")
    assert cold == warm
    assert warm.err == (
        "ERROR: bad/BUILD:3:1: //bad:b: attribute 'srcs' refers to '//gone:x': no such package "
        "'gone': no BUILD file in gone/\n"
    )


def test_cp_p_of_a_same_size_build_file_is_reevaluated(ws: Workspace) -> None:
    # cp -p keeps the inode, the size and (from the source) the mtime: only ctime moves.
    build = ws.root / "other/BUILD"
    source = ws.root / "elsewhere.txt"
    source.write_text('filegroup(name = "xther")\n')
    assert source.stat().st_size == build.stat().st_size
    before = build.stat()
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    subprocess.run(["cp", "-p", str(source), str(build)], check=True)
    after = build.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    run = Run(ws)
    assert run.evaluated == 1
    assert run.labels == ["//app:py_grp", "//lib:lib", "//other:xther"]


def test_file_created_while_glob_lists_its_directory_is_seen_next_run(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The directory's stamp must predate its listing: one taken after the
    # evaluation already includes the new file, and the cache would keep
    # the package without it.
    listing = os.scandir

    def scandir_then_create(path: str) -> object:
        if not str(path).endswith("/app") or (ws.root / "app/late.py").exists():
            return listing(path)
        entries = list(listing(path))
        (ws.root / "app/late.py").write_text("")
        return entries

    _edit(ws, "app/BUILD", (ws.root / "app/BUILD").read_text() + "\n")
    monkeypatch.setattr(glob.os, "scandir", scandir_then_create)
    assert Run(ws).packages["app"].targets["py_grp"].attrs["srcs"] == ["//app:a.py"]
    monkeypatch.setattr(glob.os, "scandir", listing)
    run = Run(ws)
    assert run.evaluated == 1
    assert run.packages["app"].targets["py_grp"].attrs["srcs"] == ["//app:a.py", "//app:late.py"]


def test_racily_clean_packages_are_evaluated_until_their_files_age(
    make_workspace: MakeWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(package, "RACY_NS", 2_000_000_000)
    ws = make_workspace(FILES)
    # Written just now: a stamp vouches for nothing, run after run (a second
    # edit in the same clock tick would leave every stat field as it was).
    assert Run(ws).evaluated == 4
    assert Run(ws).evaluated == 4
    later = time.time_ns() + 3_000_000_000
    monkeypatch.setattr(package.time, "time_ns", lambda: later)
    assert Run(ws).evaluated == 4  # aged: these stamps are trusted
    assert Run(ws).evaluated == 0


def test_racy_stamps_never_equal_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(package, "RACY_NS", 2_000_000_000)
    (tmp_path / "BUILD").write_text("")
    first = package.FileStamp.of(str(tmp_path), "BUILD")
    second = package.FileStamp.of(str(tmp_path), "BUILD")
    assert first.is_racy and second.is_racy
    assert first != second
