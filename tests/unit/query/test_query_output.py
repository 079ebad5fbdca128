"""`kiln query --output=...`: label, label_kind, build, json and graph (Graphviz DOT)."""

from __future__ import annotations

import json

import pytest

from tests.kiln_workspace import MakeWorkspace, Workspace


@pytest.fixture
def ws(make_workspace: MakeWorkspace) -> Workspace:
    return make_workspace(
        {
            "lib/BUILD": """\
                filegroup(name = "layers", srcs = ["layers.py", ":common"])
                filegroup(name = "common", srcs = ["common.py"], tags = ["x"])
                """,
            "lib/layers.py": "",
            "lib/common.py": "",
            "app/BUILD": """\
                package(default_visibility = ["//visibility:public"])

                genrule(
                    name = "gen",
                    srcs = ["//lib:layers", "in.txt"],
                    outs = ["out.txt"],
                    cmd = "cat $(SRCS) > $@",
                    executable = True,
                )
                """,
            "app/in.txt": "",
        }
    )


def _out(ws: Workspace, *args: str) -> str:
    result = ws.kiln("query", *args)
    assert result.code == 0, result.err
    return result.out


def test_label_output_is_one_label_a_line_by_package_then_name(ws: Workspace) -> None:
    assert _out(ws, "deps(//app:gen)") == (
        "//app:gen\n//app:in.txt\n//lib:common\n//lib:common.py\n//lib:layers\n//lib:layers.py\n"
    )


def test_package_sorts_before_its_subpackages(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace(
        {"a/BUILD": 'filegroup(name = "z")\n', "a/b/BUILD": 'filegroup(name = "a")\n'}
    )
    assert _out(ws, "//...") == "//a:z\n//a/b:a\n"


def test_label_kind_output(ws: Workspace) -> None:
    assert _out(ws, "--output=label_kind", "deps(//app:gen, 1) + //app:out.txt") == (
        "genrule rule //app:gen\n"
        "source file //app:in.txt\n"
        "generated file //app:out.txt\n"
        "filegroup rule //lib:layers\n"
    )


def test_build_output_is_the_rule_as_written_with_its_location(ws: Workspace) -> None:
    assert _out(ws, "--output=build", "//app:gen + //lib:common + //app:in.txt") == (
        "# app/BUILD:3:1\n"
        "genrule(\n"
        '  name = "gen",\n'
        '  srcs = ["//lib:layers", ":in.txt"],\n'
        '  outs = ["out.txt"],\n'
        '  cmd = "cat $(SRCS) > $@",\n'
        "  executable = True,\n"
        '  visibility = ["//visibility:public"],\n'
        ")\n"
        "\n"
        "# app/BUILD\n"
        "# source file //app:in.txt\n"
        "\n"
        "# lib/BUILD:2:1\n"
        "filegroup(\n"
        '  name = "common",\n'
        '  srcs = [":common.py"],\n'
        '  tags = ["x"],\n'
        ")\n"
        "\n"
    )


def test_json_output(ws: Workspace) -> None:
    targets = json.loads(_out(ws, "--output=json", "deps(//lib:layers, 1)"))
    assert targets == [
        {
            "label": "//lib:common",
            "kind": "filegroup rule",
            "attrs": {"name": "common", "srcs": ["//lib:common.py"], "tags": ["x"]},
            "deps": ["//lib:common.py"],
        },
        {
            "label": "//lib:layers",
            "kind": "filegroup rule",
            "attrs": {"name": "layers", "srcs": ["//lib:layers.py", "//lib:common"]},
            "deps": ["//lib:layers.py", "//lib:common"],
        },
        {"label": "//lib:layers.py", "kind": "source file", "attrs": {}, "deps": []},
    ]


def test_graph_output_is_graphviz_dot_as_bazel_writes_it(ws: Workspace) -> None:
    assert _out(ws, "--output=graph", "deps(//app:gen) - //lib:layers.py") == (
        "digraph mygraph {\n"
        "  node [shape=box];\n"
        '  "//app:gen"\n'
        '  "//app:gen" -> "//lib:layers"\n'
        '  "//app:gen" -> "//app:in.txt"\n'
        '  "//app:in.txt"\n'
        '  "//lib:common"\n'
        '  "//lib:common" -> "//lib:common.py"\n'
        '  "//lib:common.py"\n'
        '  "//lib:layers"\n'
        '  "//lib:layers" -> "//lib:common"\n'  # the edge to the excluded file is left out
        "}\n"
    )


def test_empty_graph_is_still_a_graph(ws: Workspace) -> None:
    assert _out(ws, "--output=graph", "set()") == "digraph mygraph {\n  node [shape=box];\n}\n"
