"""`.kilnrc` files, read and expanded the way Bazel reads `.bazelrc`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from kiln.cli import rcfile
from kiln.cli.rcfile import RcError, RcLine
from kiln.errors import Location


def _rc(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def _expand(command: str, cli: list[str], lines: list[RcLine]) -> list[str]:
    return [arg.text for arg in rcfile.expand(command, cli, lines)]


# -- reading -------------------------------------------------------------------


def test_read_gives_command_config_args_and_location(tmp_path: Path) -> None:
    path = _rc(
        tmp_path / ".kilnrc",
        """\
        # a comment

        build --jobs=4 --keep_going  # trailing comment
        build:ci --config=remote
        query --output=json
        """,
    )
    lines = rcfile.read(path, tmp_path)
    assert lines == [
        RcLine("build", None, ("--jobs=4", "--keep_going"), Location(str(path), 3)),
        RcLine("build", "ci", ("--config=remote",), Location(str(path), 4)),
        RcLine("query", None, ("--output=json",), Location(str(path), 5)),
    ]


def test_read_joins_backslash_continuations(tmp_path: Path) -> None:
    path = _rc(tmp_path / ".kilnrc", "build --jobs=4 \\\n    --keep_going\nquery --output=json\n")
    lines = rcfile.read(path, tmp_path)
    assert [line.args for line in lines] == [("--jobs=4", "--keep_going"), ("--output=json",)]
    assert lines[1].location.line == 3  # physical line numbers are kept


def test_read_shell_quoting(tmp_path: Path) -> None:
    path = _rc(tmp_path / ".kilnrc", "build '--action_env=A=b c'\n")
    assert rcfile.read(path, tmp_path)[0].args == ("--action_env=A=b c",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "biuld --jobs=4\n",
            "unknown command 'biuld' "
            "(known: common, startup, build, test, query, clean, info, report, worker)\n"
            "  hint: did you mean 'build'?",
        ),
        (
            "frobnicate --jobs=4\n",
            "unknown command 'frobnicate' "
            "(known: common, startup, build, test, query, clean, info, report, worker)",
        ),
        ("build: --jobs=4\n", "empty config name in 'build:'"),
        ("build 'unclosed\n", "cannot parse this line: No closing quotation"),
        ("import\n", "'import' takes exactly one path"),
        ("import /no/such/file.rc\n", "imported rc file /no/such/file.rc does not exist"),
    ],
)
def test_bad_rc_line_is_an_error_at_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = _rc(tmp_path / ".kilnrc", "build --jobs=2\n" + text)
    with pytest.raises(RcError) as raised:
        rcfile.read(path, tmp_path)
    assert raised.value.format() == f"{path}:2: {message}"


def test_import_reads_another_file_in_place(tmp_path: Path) -> None:
    _rc(tmp_path / "shared.rc", "build --jobs=8\n")
    path = _rc(
        tmp_path / ".kilnrc",
        "build --jobs=1\nimport %workspace%/shared.rc\ntry-import %workspace%/absent.rc\n",
    )
    lines = rcfile.read(path, tmp_path)
    assert [(line.args, line.location.file) for line in lines] == [
        (("--jobs=1",), str(path)),
        (("--jobs=8",), str(tmp_path / "shared.rc")),
    ]


def test_import_of_itself_is_an_error_not_a_recursion(tmp_path: Path) -> None:
    _rc(tmp_path / "a.rc", "import %workspace%/b.rc\n")
    _rc(tmp_path / "b.rc", "import %workspace%/a.rc\n")
    with pytest.raises(RcError, match=r"rc file .*a\.rc imports itself"):
        rcfile.read(tmp_path / "a.rc", tmp_path)


def test_workspace_placeholder_outside_a_workspace_is_an_error(tmp_path: Path) -> None:
    path = _rc(tmp_path / "home.rc", "import %workspace%/x.rc\n")
    with pytest.raises(RcError, match="%workspace% used outside a workspace"):
        rcfile.read(path, None)


def test_unreadable_rc_file_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / ".kilnrc"
    path.write_bytes(b"build --jobs=\xff\n")
    with pytest.raises(RcError, match="cannot read rc file"):
        rcfile.read(path, tmp_path)


# -- expanding -----------------------------------------------------------------


def _lines(tmp_path: Path, text: str) -> list[RcLine]:
    return rcfile.read(_rc(tmp_path / ".kilnrc", text), tmp_path)


def test_rc_options_come_before_the_command_line(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "query --output=json\n")
    assert _expand("query", ["--output=label", "//..."], lines) == [
        "--output=json",
        "--output=label",
        "//...",
    ]


def test_options_apply_to_their_command_and_those_inheriting_from_it(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "build --jobs=4\nclean --expunge\nquery --output=json\n")
    assert _expand("build", [], lines) == ["--jobs=4"]
    assert _expand("clean", [], lines) == ["--jobs=4", "--expunge"]
    assert _expand("info", [], lines) == ["--jobs=4"]
    assert _expand("query", [], lines) == ["--output=json"]  # query does not inherit build


def test_config_lines_apply_only_with_config_and_where_it_stands(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "build --jobs=4\nbuild:ci --keep_going\nbuild:ci --jobs=64\n")
    assert _expand("build", ["//a"], lines) == ["--jobs=4", "//a"]
    assert _expand("build", ["--jobs=2", "--config=ci", "//a"], lines) == [
        "--jobs=4",
        "--jobs=2",
        "--keep_going",
        "--jobs=64",
        "//a",
    ]
    assert _expand("build", ["--config", "ci"], lines) == ["--jobs=4", "--keep_going", "--jobs=64"]


def test_config_may_use_another_config(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "build:ci --config=remote --keep_going\nbuild:remote --jobs=200\n")
    assert _expand("build", ["--config=ci"], lines) == ["--jobs=200", "--keep_going"]


def test_config_of_an_inherited_command_applies(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "build:ci --keep_going\n")
    assert _expand("clean", ["--config=ci"], lines) == ["--keep_going"]


def test_undefined_config_is_an_error_with_a_hint(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "build:ci --keep_going\n")
    with pytest.raises(RcError) as raised:
        rcfile.expand("query", ["--config=ci"], lines)
    assert raised.value.format() == (
        "config value 'ci' is not defined in any .kilnrc file for the 'query' command\n"
        "  hint: add a line such as 'query:ci --keep_going' to .kilnrc"
    )


def test_config_expanding_to_itself_is_an_error_at_the_rc_line(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "build:a --config=b\nbuild:b --config=a\n")
    with pytest.raises(RcError) as raised:
        rcfile.expand("build", ["--config=a"], lines)
    assert raised.value.format() == (
        f"{tmp_path / '.kilnrc'}:2: config 'a' expands to itself (a -> b -> a)"
    )


def test_args_remember_their_rc_line_and_whether_inherited(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "common --color=no\nquery --output=json\n")
    args = rcfile.expand("query", ["//..."], lines)
    assert [(a.text, a.origin, a.inherited) for a in args] == [
        ("--color=no", Location(str(tmp_path / ".kilnrc"), 1), True),
        ("--output=json", Location(str(tmp_path / ".kilnrc"), 2), False),
        ("//...", None, False),
    ]
    # A line of the command a command inherits from is inherited as a common one is.
    lines = _lines(tmp_path, "build --jobs=2\nclean --expunge\n")
    assert [(a.text, a.inherited) for a in rcfile.expand("clean", [], lines)] == [
        ("--jobs=2", True),
        ("--expunge", False),
    ]


# -- which files ---------------------------------------------------------------


def test_rc_files_are_the_workspace_one_then_the_home_one(tmp_path: Path, home: Path) -> None:
    workspace = tmp_path / "ws"
    _rc(workspace / ".kilnrc", "")
    _rc(home / ".kilnrc", "")
    both = rcfile.rc_files(workspace, workspace_rc=True, home_rc=True)
    assert both == [workspace / ".kilnrc", home / ".kilnrc"]
    assert rcfile.rc_files(workspace, workspace_rc=False, home_rc=True) == [home / ".kilnrc"]
    assert rcfile.rc_files(workspace, workspace_rc=True, home_rc=False) == [workspace / ".kilnrc"]
    assert rcfile.rc_files(home, workspace_rc=True, home_rc=True) == [home / ".kilnrc"]


def test_missing_rc_files_are_skipped(tmp_path: Path) -> None:
    assert rcfile.rc_files(tmp_path, workspace_rc=True, home_rc=True) == []
