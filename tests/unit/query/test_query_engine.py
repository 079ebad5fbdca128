"""`kiln query` functions and operators, on a small fixture workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kiln_workspace import MakeWorkspace, Workspace, write_file

FILES = {
    "models/BUILD": """\
        package(default_visibility = ["//visibility:public"])

        torch_model(
            name = "mlp",
            src = "mlp.py",
            deps = ["//lib:layers"],
            factory = "mlp:build",
            inputs = [{"name": "x", "shape": [8, 10]}],
        )

        aoti_package(
            name = "mlp_pt2",
            model = ":mlp",
        )

        genrule(
            name = "report",
            srcs = [":mlp_pt2", "notes.txt"],
            outs = ["report.txt"],
            cmd = "cat $(SRCS) > $@",
        )
        """,
    "models/mlp.py": "",
    "models/notes.txt": "",
    "lib/BUILD": """\
        filegroup(name = "layers", srcs = ["layers.py", ":common"])
        filegroup(name = "common", srcs = ["common.py"])
        """,
    "lib/layers.py": "",
    "lib/common.py": "",
    "tools/BUILD": """\
        genrule(name = "tool", outs = ["tool.sh"], cmd = "touch $@", executable = True)
        """,
}

REPORT_CLOSURE = [
    "//lib:common",
    "//lib:common.py",
    "//lib:layers",
    "//lib:layers.py",
    "//models:mlp",
    "//models:mlp.py",
    "//models:mlp_pt2",
    "//models:notes.txt",
    "//models:report",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One workspace for the module: queries only read it.
    path = tmp_path_factory.mktemp("query") / "ws"
    for name, text in {"WORKSPACE": "", **FILES}.items():
        write_file(path, name, text)
    return path


@pytest.fixture
def ws(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Workspace:
    return Workspace(root, dict(os.environ), capsys, monkeypatch)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (
            "//...",
            [
                "//lib:common",
                "//lib:layers",
                "//models:mlp",
                "//models:mlp_pt2",
                "//models:report",
                "//tools:tool",
            ],
        ),
        ("deps(//models:report)", REPORT_CLOSURE),
        ("deps(//models:report, 1)", ["//models:mlp_pt2", "//models:notes.txt", "//models:report"]),
        ("deps(//models:report, 0)", ["//models:report"]),
        (
            "deps(//models:report, 2)",
            ["//models:mlp", "//models:mlp_pt2", "//models:notes.txt", "//models:report"],
        ),
        ("deps(//models:report.txt, 1)", ["//models:report", "//models:report.txt"]),
        (
            "rdeps(//..., //lib:common.py)",
            [
                "//lib:common",
                "//lib:common.py",
                "//lib:layers",
                "//models:mlp",
                "//models:mlp_pt2",
                "//models:report",
            ],
        ),
        ("rdeps(//..., //lib:common.py, 1)", ["//lib:common", "//lib:common.py"]),
        ("rdeps(//lib:all, //lib:common)", ["//lib:common", "//lib:layers"]),
        ("kind(genrule, //...)", ["//models:report", "//tools:tool"]),
        ("kind('^filegroup rule$', //...)", ["//lib:common", "//lib:layers"]),
        ("kind(rule, deps(//models:mlp))", ["//lib:common", "//lib:layers", "//models:mlp"]),
        ("kind('source file', deps(//lib:layers))", ["//lib:common.py", "//lib:layers.py"]),
        ("kind('generated file', //...:*)", ["//models:report.txt", "//tools:tool.sh"]),
        ("attr(factory, '^mlp:', //...)", ["//models:mlp"]),
        ("attr(executable, 1, //...)", ["//tools:tool"]),
        ("attr(srcs, 'notes', //...)", ["//models:report"]),
        (
            "attr(visibility, public, //...)",
            ["//models:mlp", "//models:mlp_pt2", "//models:report"],
        ),
        (
            "filter('\\.py$', deps(//models:report))",
            ["//lib:common.py", "//lib:layers.py", "//models:mlp.py"],
        ),
        ("labels(srcs, //lib:layers)", ["//lib:common", "//lib:layers.py"]),
        (
            "deps(//models:report) - deps(//models:mlp)",
            ["//models:mlp_pt2", "//models:notes.txt", "//models:report"],
        ),
        (
            "deps(//models:report) except deps(//models:mlp_pt2, 1)",
            [
                "//lib:common",
                "//lib:common.py",
                "//lib:layers",
                "//lib:layers.py",
                "//models:mlp.py",
                "//models:notes.txt",
                "//models:report",
            ],
        ),
        ("//lib:all + //tools:all", ["//lib:common", "//lib:layers", "//tools:tool"]),
        ("//lib:all union //tools:tool", ["//lib:common", "//lib:layers", "//tools:tool"]),
        (
            "//models:* ^ deps(//models:report, 1)",
            ["//models:mlp_pt2", "//models:notes.txt", "//models:report"],
        ),
        (
            "deps(//models:mlp) intersect //lib:*",
            ["//lib:common", "//lib:common.py", "//lib:layers", "//lib:layers.py"],
        ),
        ("set(//tools:tool //lib:layers)", ["//lib:layers", "//tools:tool"]),
        (
            "somepath(//models:report, //lib:common.py)",
            [
                "//lib:common",
                "//lib:common.py",
                "//lib:layers",
                "//models:mlp",
                "//models:mlp_pt2",
                "//models:report",
            ],
        ),
        (
            "allpaths(//models:mlp, //lib:layers.py)",
            ["//lib:layers", "//lib:layers.py", "//models:mlp"],
        ),
        ("somepath(//tools:tool, //lib:layers)", []),
        ("tests(//...)", []),
    ],
)
def test_query(ws: Workspace, expression: str, expected: list[str]) -> None:
    assert ws.query(expression) == expected


def test_relative_patterns_in_queries_use_the_working_directory(ws: Workspace) -> None:
    assert ws.query("deps(:layers, 1)", cwd="lib") == [
        "//lib:common",
        "//lib:layers",
        "//lib:layers.py",
    ]
    assert ws.query("rdeps(//..., common.py, 1) - :common", cwd="lib") == ["//lib:common.py"]


def test_empty_result_says_so_and_succeeds(ws: Workspace) -> None:
    result = ws.kiln("query", "//lib:all - //lib:*")
    assert (result.code, result.out, result.err) == (0, "", "INFO: empty results\n")


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        (
            "//models:reprot",
            "ERROR: no such target '//models:reprot': package 'models' declares no "
            "target 'reprot' and has no file of that name\n  hint: did you mean 'report'?\n",
        ),
        ("deps(//nowhere:x)", "ERROR: no such package 'nowhere': no BUILD file in nowhere/\n"),
        ("'-//lib:all'", "ERROR: '-//lib:all': negative patterns are written 'X - Y' in queries\n"),
        (
            "kind('(', //...)",
            "ERROR: invalid regular expression '(': missing ): (\n",
        ),
        (
            "//lib:a:b",
            "ERROR: invalid target pattern '//lib:a:b': target name contains the character ':'\n",
        ),
    ],
)
def test_query_errors_exit_1_with_one_message(ws: Workspace, expression: str, error: str) -> None:
    result = ws.kiln("query", expression)
    assert (result.code, result.out, result.err) == (1, "", error)


# -- bounded evaluation (issue 11, B9 and B12) ----------------------------------


def test_union_of_5000_terms_evaluates_without_recursion(ws: Workspace) -> None:
    # A RecursionError traceback from about 980 terms on: the parser leans the chain left.
    terms = ["//lib:layers", "//lib:common", "//tools:tool"] * 1700
    expression = " + ".join(terms) + " - //tools:tool ^ //lib:all"
    assert ws.query(expression) == ["//lib:common", "//lib:layers"]


@pytest.mark.parametrize(
    ("expression", "caret"),
    [
        ("(" * 2000 + "//lib:layers" + ")" * 2000, 100),
        ("deps(" * 3000 + "//lib:layers" + ")" * 3000, 500),
        ("//lib:layers + " + "(//lib:common - " * 2000 + "//x" + ")" * 2000, 1615),
    ],
    ids=["2000_parentheses", "3000_nested_deps", "2000_nested_differences"],
)
def test_deep_nesting_is_a_syntax_error_not_a_recursion_error(
    ws: Workspace, expression: str, caret: int
) -> None:
    result = ws.kiln("query", expression)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "ERROR: syntax error in query expression: expression nested more than 100 levels "
        "deep (parentheses and function calls)\n"
        f"    {expression}\n"
        f"    {' ' * caret}^\n"
    )


def test_nesting_up_to_the_limit_evaluates(ws: Workspace) -> None:
    expression = "deps(" * 100 + "//lib:layers" + ")" * 100
    assert ws.query(expression) == [
        "//lib:common",
        "//lib:common.py",
        "//lib:layers",
        "//lib:layers.py",
    ]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "expression",
    [
        "filter('(a+)+$', //backtrack:all)",
        "kind('((((.*)*)*)*)*x', //backtrack:all)",
        "attr(cmd, '(x+x+)+y', //backtrack:all)",
    ],
)
def test_catastrophic_regex_matches_in_linear_time(
    make_workspace: MakeWorkspace, expression: str
) -> None:
    # Python's re backtracks on these for minutes to centuries; RE2 does not.
    name = "a" * 40 + "!"
    ws = make_workspace(
        {
            "backtrack/BUILD": f'genrule(name = "{name}", outs = ["o"], cmd = "{"x" * 40}")\n',
        }
    )
    assert ws.query(expression) == []


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        (
            "(a)\\1",
            "invalid regular expression '(a)\\1': invalid escape sequence: \\1\n"
            "  hint: kiln matches with RE2: Python's syntax without backreferences or "
            "lookaround",
        ),
        (
            "a(?=b)",
            "invalid regular expression 'a(?=b)': invalid perl operator: (?=\n"
            "  hint: kiln matches with RE2: Python's syntax without backreferences or "
            "lookaround",
        ),
        (
            "x{1000}{1000}",
            "invalid regular expression 'x{1000}{1000}': bad repetition operator: {1000}{1000}",
        ),
    ],
)
def test_regex_re2_cannot_match_is_refused_with_a_message(
    ws: Workspace, pattern: str, error: str
) -> None:
    result = ws.kiln("query", f"filter('{pattern}', //lib:all)")
    assert (result.code, result.out, result.err) == (1, "", f"ERROR: {error}\n")
