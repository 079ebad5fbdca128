"""Visibility, as Bazel enforces it: who may depend on a target of another package.

The refusals are pinned in tests/failing/visibility_*.txtar; these are the
dependencies that must still be allowed.
"""

from __future__ import annotations

import pytest
from kiln.loading.visibility import allows

from tests.kiln_workspace import MakeWorkspace


@pytest.mark.parametrize(
    ("visibility", "package", "allowed"),
    [
        (["//visibility:public"], "any/where", True),
        (["//visibility:private"], "b", False),
        (None, "b", False),
        (["//b:__pkg__"], "b", True),
        (["//b:__pkg__"], "b/sub", False),
        (["//b:__subpackages__"], "b", True),
        (["//b:__subpackages__"], "b/sub/deeper", True),
        (["//b:__subpackages__"], "bb", False),
        (["//:__subpackages__"], "anything", True),
        (["//:__pkg__"], "", True),
        (["//c:__pkg__", "//b:__pkg__"], "b", True),
    ],
)
def test_allows(visibility: list[str] | None, package: str, allowed: bool) -> None:
    assert allows(visibility, package) is allowed


def test_dependencies_the_visibility_allows_build(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "BUILD": 'exports_files(["top.txt"])\n',
            "top.txt": "",
            "pub/BUILD": """\
                package(default_visibility = ["//visibility:public"])

                filegroup(name = "p")
                genrule(name = "g", outs = ["g.txt"], cmd = "echo > $@")
                """,
            "lib/BUILD": """\
                filegroup(name = "for_app", visibility = [":__pkg__", "//app:__subpackages__"])
                filegroup(name = "mine")  # private: for this package's targets only
                filegroup(
                    name = "uses_mine",
                    srcs = [":mine", "local.txt"],
                    visibility = ["//visibility:public"],
                )
                exports_files(["shared.txt"])
                """,
            "lib/local.txt": "",
            "lib/shared.txt": "",
            "app/deep/BUILD": """\
                filegroup(
                    name = "a",
                    srcs = [
                        "//:top.txt",
                        "//pub:p",
                        "//pub:g.txt",
                        "//lib:for_app",
                        "//lib:uses_mine",
                        "//lib:shared.txt",
                    ],
                )
                """,
        }
    )
    run = ws.kiln("build", "//app/deep:a", "//lib:all")
    assert run.code == 0, run.err


def test_query_does_not_check_visibility_as_in_bazel(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {
            "a/BUILD": 'filegroup(name = "x")\n',
            "a/f.txt": "",
            "b/BUILD": 'filegroup(name = "y", srcs = ["//a:x", "//a:f.txt"])\n',
        }
    )
    assert ws.query("deps(//b:y)") == ["//a:f.txt", "//a:x", "//b:y"]
    assert ws.kiln("build", "//b:y").code == 1
