"""Expanding command-line target patterns into labels, as Bazel does."""

from __future__ import annotations

import pytest
from kiln.errors import KilnError
from kiln.label import TargetPattern
from kiln.loading import patterns

from tests.kiln_workspace import MakeWorkspace, Workspace


@pytest.fixture
def ws(make_workspace: MakeWorkspace) -> Workspace:
    return make_workspace(
        {
            "BUILD": 'filegroup(name = "root")\n',
            "a/BUILD": """\
                genrule(name = "gen", srcs = ["in.txt"], outs = ["out.txt"], cmd = "cp $< $@")
                filegroup(name = "a", srcs = [":gen", "//a/b:b"])
                exports_files(["README"])
                """,
            "a/in.txt": "",
            "a/README": "",
            "a/b/BUILD": 'filegroup(name = "b")\n',
            "a/b/c/BUILD": 'filegroup(name = "c")\n',
            "a/b/c/file.txt": "",
            "z/BUILD": 'filegroup(name = "z")\n',
            "kiln-out/a/BUILD": 'filegroup(name = "output")\n',  # kiln's outputs are no packages
            ".hidden/BUILD": 'filegroup(name = "hidden")\n',
            "ignored/BUILD": 'filegroup(name = "ignored")\n',
            ".kilnignore": "# comment\nignored/\n",
        }
    )


def _expand(ws: Workspace, *texts: str, working: str = "") -> list[str]:
    parsed = patterns.parse_patterns(list(texts), working)
    return patterns.expand(ws.loader(), parsed)


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (["//..."], ["//:root", "//a:gen", "//a:a", "//a/b:b", "//a/b/c:c", "//z:z"]),
        (["//a/..."], ["//a:gen", "//a:a", "//a/b:b", "//a/b/c:c"]),
        (["//a/b/..."], ["//a/b:b", "//a/b/c:c"]),
        (["//a:all"], ["//a:gen", "//a:a"]),
        (["//a:*"], ["//a:gen", "//a:out.txt", "//a:a", "//a:README", "//a:in.txt"]),
        (["//a"], ["//a:a"]),
        (["//a:in.txt"], ["//a:in.txt"]),
        (["//a:out.txt"], ["//a:out.txt"]),
        (["//...", "-//a/..."], ["//:root", "//z:z"]),
        (["//a/...", "-//a/b/c:c", "//z"], ["//a:gen", "//a:a", "//a/b:b", "//z:z"]),
        (["-//a:a", "//a:a"], ["//a:a"]),  # order matters, as in Bazel
    ],
)
def test_expand(ws: Workspace, texts: list[str], expected: list[str]) -> None:
    assert _expand(ws, *texts) == expected


@pytest.mark.parametrize(
    ("working", "text", "expected"),
    [
        ("a", ":a", ["//a:a"]),
        ("a", "a", ["//a:a"]),
        ("a", "b", ["//a/b:b"]),  # a package: its default target
        ("a", "b/c", ["//a/b/c:c"]),
        ("a/b", "c/file.txt", ["//a/b/c:file.txt"]),  # the deepest package holding it
        ("a", "...", ["//a:gen", "//a:a", "//a/b:b", "//a/b/c:c"]),
        ("a/b", "c:all", ["//a/b/c:c"]),
        ("", "z", ["//z:z"]),
    ],
)
def test_relative_patterns_resolve_from_the_working_directory(
    ws: Workspace, working: str, text: str, expected: list[str]
) -> None:
    assert _expand(ws, text, working=working) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("//nowhere/...", "no packages found beneath '//nowhere' (pattern '//nowhere/...')"),
        ("//ignored/...", "no packages found beneath '//ignored' (pattern '//ignored/...')"),
        ("//nowhere:all", "no such package 'nowhere': no BUILD file in nowhere/"),
        (
            "//a:nope",
            "no such target '//a:nope': package 'a' declares no target 'nope' and has no file "
            "of that name",
        ),
    ],
)
def test_patterns_naming_nothing_are_errors(ws: Workspace, text: str, message: str) -> None:
    with pytest.raises(KilnError) as raised:
        _expand(ws, text)
    assert raised.value.message == message


def test_typo_in_target_name_gets_a_hint(ws: Workspace) -> None:
    with pytest.raises(KilnError) as raised:
        _expand(ws, "//a:gne")
    assert raised.value.hint == "did you mean 'gen'?"


def test_relative_pattern_outside_any_package(ws: Workspace) -> None:
    ws.write("loose/x.txt", "")
    assert patterns.expand(ws.loader(), [TargetPattern.parse("loose/x.txt")]) == ["//:loose/x.txt"]
