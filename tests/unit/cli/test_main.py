"""The kiln command line: startup options, rc files, working directory, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from kiln.cli.commands import COMMANDS

from tests.kiln_workspace import MakeWorkspace, Workspace

FILES = {
    "app/BUILD": """\
        filegroup(name = "app", srcs = ["main.py", "//lib"])
        filegroup(name = "extra")
        """,
    "app/main.py": "",
    "app/sub/BUILD": 'filegroup(name = "sub")\n',
    "lib/BUILD": 'filegroup(name = "lib")\n',
}


@pytest.fixture
def ws(make_workspace: MakeWorkspace) -> Workspace:
    return make_workspace(FILES)


# -- exit codes and messages ---------------------------------------------------


def test_help_and_version_exit_0(ws: Workspace) -> None:
    assert ws.kiln("help").code == 0
    assert ws.kiln().out.startswith("Usage: kiln")
    version = ws.kiln("version")
    assert (version.code, version.out) == (0, "kiln 0.1.0\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["frobnicate"], "ERROR: unknown command 'frobnicate'\n  hint: commands: "),
        (["--bogus", "query", "//..."], "ERROR: unknown startup option '--bogus'\n"),
        (["query"], "ERROR: kiln query: Missing argument 'EXPRESSION'."),
        (["query", "--outptu=json", "//..."], "ERROR: unknown option '--outptu' for 'kiln query'"),
        (["query", "--output=yaml", "//..."], "ERROR: kiln query: Invalid value for '--output'"),
    ],
)
def test_usage_errors_exit_1_with_one_message(ws: Workspace, args: list[str], message: str) -> None:
    result = ws.kiln(*args)
    assert result.code == 1
    assert result.err.startswith(message)
    assert "Traceback" not in result.err


def test_outside_a_workspace_is_a_user_error(tmp_path: Path, ws: Workspace) -> None:
    outside = tmp_path / "nowhere"
    outside.mkdir()
    with ws.monkeypatch.context() as patch:
        patch.setattr(ws, "root", outside)
        result = ws.kiln("query", "//...")
    assert result.code == 1
    assert result.err.startswith(
        f"ERROR: not inside a kiln workspace: no WORKSPACE file in {outside}"
    )


def test_a_bug_in_kiln_exits_2_with_a_traceback(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*args: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr("kiln.query.engine.QueryEngine.evaluate", explode)
    result = ws.kiln("query", "//...")
    assert result.code == 2
    assert "INTERNAL ERROR: kiln crashed; this is a bug in kiln" in result.err
    assert "Traceback" in result.err and "ZeroDivisionError: boom" in result.err


def test_ctrl_c_exits_8_with_one_line_not_a_traceback(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt  # click turns it into Abort inside a command

    monkeypatch.setattr("kiln.query.engine.QueryEngine.evaluate", interrupted)
    result = ws.kiln("query", "//...")
    assert result.code == 8
    assert result.err.endswith("kiln: interrupted\n")
    assert "INTERNAL ERROR" not in result.err and "Traceback" not in result.err


# -- the command table: help, close matches, rc inheritance ---------------------


def test_help_lists_the_commands_of_the_table(ws: Workspace) -> None:
    lines = ws.kiln("help").out.splitlines()
    listed = [line.split(None, 1) for line in lines if line.startswith("  ")]
    assert listed == [[command.name, command.help] for command in COMMANDS]  # and no `test`


@pytest.mark.parametrize("args", [["help", "clean"], ["clean", "--help"]])
def test_help_of_a_command_prints_its_options_outside_a_workspace(
    tmp_path: Path, ws: Workspace, args: list[str]
) -> None:
    with ws.monkeypatch.context() as patch:
        patch.setattr(ws, "root", tmp_path)
        result = ws.kiln(*args)
    assert result.code == 0, result.err
    assert result.out.startswith("Usage: kiln clean [OPTIONS]\n")
    assert "--expunge" in result.out and "--nolock_wait" in result.out


def test_help_of_a_rule_prints_its_attributes(ws: Workspace) -> None:
    from kiln.cli import rule_help

    result = ws.kiln("help", "genrule")
    assert (result.code, result.out) == (0, rule_help.describe("genrule")), result.err


def test_every_option_of_every_command_has_help_text() -> None:
    for command in COMMANDS:
        for param in command.load().params:
            if isinstance(param, click.Option):
                assert param.help, f"kiln {command.name} {'/'.join(param.opts)} has no help"


@pytest.mark.parametrize(
    ("args", "err"),
    [
        (
            ["biuld", "//..."],
            "ERROR: unknown command 'biuld'\n"
            "  hint: did you mean 'build'? commands: build, test, query, clean, info, report, "
            "worker; see 'kiln help'\n",
        ),
        (
            ["tset", "//..."],
            "ERROR: unknown command 'tset'\n"
            "  hint: did you mean 'test'? commands: build, test, query, clean, info, report, "
            "worker; see 'kiln help'\n",
        ),
        (
            ["build", "--jbos=2", "//..."],
            "ERROR: unknown option '--jbos' for 'kiln build'\n"
            "  hint: did you mean '--jobs'? see 'kiln build --help'\n",
        ),
        (
            ["help", "genrul"],
            "ERROR: no command or rule named 'genrul'\n"
            "  hint: did you mean 'genrule'? see 'kiln help' for the commands\n",
        ),
    ],
)
def test_a_mistyped_name_gets_the_close_match(ws: Workspace, args: list[str], err: str) -> None:
    result = ws.kiln(*args)
    assert (result.code, result.err) == (1, err)


def test_build_rc_options_reach_clean_and_info_which_drop_what_they_do_not_take(
    ws: Workspace, tmp_path: Path
) -> None:
    cache = tmp_path / "shared-cache"
    ws.write(".kilnrc", f"build --jobs=2 --keep_going\nbuild --disk_cache {cache}\n")
    (cache / "cas").mkdir(parents=True)
    info = ws.kiln("info", "release")
    assert (info.code, info.out) == (0, "kiln 0.1.0\n"), info.err
    clean = ws.kiln("clean", "--expunge_disk_cache")
    assert clean.code == 0, clean.err
    assert not (cache / "cas").exists()  # --disk_cache, inherited from build, was taken


def test_startup_lines_set_startup_options_the_command_line_overrides(
    ws: Workspace, tmp_path: Path
) -> None:
    """`startup --output_base=DIR` in .kilnrc, as Bazel reads it: no need to type it."""
    ws.write(".kilnrc", f"startup --output_base={tmp_path / 'base'}\n")
    info = ws.kiln("info", "output_base")
    assert (info.code, info.out) == (0, f"{tmp_path / 'base'}\n"), info.err
    given = ws.kiln(f"--output_base={tmp_path / 'other'}", "info", "output_base")
    assert given.out == f"{tmp_path / 'other'}\n"


def test_a_startup_line_cannot_choose_the_rc_files(ws: Workspace) -> None:
    ws.write(".kilnrc", "startup --nohome_rc\n")
    result = ws.kiln("info", "release")
    assert result.code == 1
    assert result.err.startswith(
        f"ERROR: '--nohome_rc' cannot be set in an rc file ({ws.root / '.kilnrc'}:1): it "
        "decides which rc files are read\n"
    )


def test_common_disk_cache_is_the_one_info_shows(ws: Workspace, tmp_path: Path) -> None:
    ws.write(".kilnrc", f"common --disk_cache={tmp_path / 'shared'}\n")
    info = ws.kiln("info", "disk_cache")
    assert (info.code, info.out) == (0, f"{tmp_path / 'shared'}\n"), info.err


def test_an_unknown_option_on_the_commands_own_rc_line_is_still_an_error(
    ws: Workspace,
) -> None:
    ws.write(".kilnrc", "build --jobs=2\nclean --jobs=2\n")
    result = ws.kiln("clean")
    assert result.code == 1
    assert result.err.startswith(
        f"ERROR: unknown option '--jobs' for 'kiln clean' (from {ws.root / '.kilnrc'}:2)\n"
    )


# -- the working directory sets the current package ----------------------------


@pytest.mark.parametrize(
    ("cwd", "pattern", "expected"),
    [
        ("", "//app", ["//app:app"]),
        ("app", ":extra", ["//app:extra"]),
        ("app", "extra", ["//app:extra"]),
        ("app", ":all", ["//app:app", "//app:extra"]),
        ("app", "...", ["//app:app", "//app:extra", "//app/sub:sub"]),
        ("app", "sub", ["//app/sub:sub"]),  # a/b names the package's default target first
        ("app", "sub:sub", ["//app/sub:sub"]),
        ("app", "main.py", ["//app:main.py"]),
        ("app/sub", ":sub", ["//app/sub:sub"]),
        ("app/sub", "//lib", ["//lib:lib"]),
    ],
)
def test_working_directory_sets_the_current_package(
    ws: Workspace, cwd: str, pattern: str, expected: list[str]
) -> None:
    assert ws.query(pattern, cwd=cwd) == expected


def test_relative_pattern_naming_nothing_is_an_error(ws: Workspace) -> None:
    result = ws.kiln("query", "nothing/here", cwd="app")
    assert result.code == 1
    assert result.err == (
        "ERROR: no such target '//app:nothing/here': package 'app' declares no target "
        "'nothing/here' and has no file of that name\n"
    )


def test_after_double_dash_words_are_target_patterns_as_in_bazel(ws: Workspace) -> None:
    """`--` ends the options: what follows is patterns, and `-//x` subtracts."""
    built = ws.kiln("build", "--", "//app/...", "-//app/sub", "-//app:app")
    assert built.code == 0, built.err
    assert "Target //app:extra up-to-date" in built.err
    assert "//app/sub:sub" not in built.err and "//app:app" not in built.err


def test_a_flag_after_double_dash_is_refused_not_swallowed(ws: Workspace) -> None:
    # With a root package, '--explain' was the subtraction of '//:-explain': nothing.
    ws.write("BUILD", 'filegroup(name = "root")\n')
    built = ws.kiln("build", "//lib", "--", "--explain")
    assert built.code == 1
    assert built.err == (
        "ERROR: invalid target pattern '--explain': a pattern starts with one '-' at most "
        "(a subtraction, as in -//pkg:x); every word after '--' is a target pattern: put "
        "flags before '--'\n"
    )


# -- rc files through `kiln query` ----------------------------------------------


def test_workspace_rc_query_option_takes_effect(ws: Workspace) -> None:
    ws.write(".kilnrc", "query --output=json\n")
    result = ws.kiln("query", "//lib")
    assert result.code == 0, result.err
    assert [t["label"] for t in json.loads(result.out)] == ["//lib:lib"]


def test_command_line_option_overrides_the_rc_file(ws: Workspace) -> None:
    ws.write(".kilnrc", "query --output=json\n")
    assert ws.query("//lib", "--output=label") == ["//lib:lib"]


def test_home_rc_is_read_after_the_workspace_rc(ws: Workspace, home: Path) -> None:
    ws.write(".kilnrc", "query --output=json\n")
    (home / ".kilnrc").write_text("query --output=label_kind\n")
    assert ws.query("//lib") == ["filegroup rule //lib:lib"]


def test_nohome_rc_skips_the_home_rc(ws: Workspace, home: Path) -> None:
    (home / ".kilnrc").write_text("query --output=label_kind\n")
    result = ws.kiln("--nohome_rc", "query", "//lib")
    assert (result.code, result.out) == (0, "//lib:lib\n")


def test_noworkspace_rc_skips_the_workspace_rc(ws: Workspace) -> None:
    ws.write(".kilnrc", "query --output=label_kind\n")
    result = ws.kiln("--noworkspace_rc", "query", "//lib")
    assert (result.code, result.out) == (0, "//lib:lib\n")


def test_config_selects_config_lines(ws: Workspace) -> None:
    ws.write(".kilnrc", "query:kinds --output=label_kind\n")
    assert ws.query("//lib") == ["//lib:lib"]
    assert ws.query("//lib", "--config=kinds") == ["filegroup rule //lib:lib"]


def test_build_lines_do_not_reach_query(ws: Workspace) -> None:
    ws.write(".kilnrc", "build --jobs=4\nbuild:ci --keep_going\n")
    assert ws.query("//lib") == ["//lib:lib"]


def test_common_options_a_command_does_not_know_are_dropped(ws: Workspace) -> None:
    ws.write(".kilnrc", "common --keep_going\ncommon --output=label_kind\n")
    assert ws.query("//lib") == ["filegroup rule //lib:lib"]


def test_common_options_keep_or_drop_their_separate_values(ws: Workspace) -> None:
    ws.write(".kilnrc", "common --jobs 4\ncommon --output label_kind\n")
    assert ws.query("//lib") == ["filegroup rule //lib:lib"]


def test_unknown_rc_option_names_the_rc_line(ws: Workspace) -> None:
    ws.write(".kilnrc", "# options\nquery --bogus\n")
    result = ws.kiln("query", "//lib")
    assert result.code == 1
    assert result.err == (
        f"ERROR: unknown option '--bogus' for 'kiln query' (from {ws.root / '.kilnrc'}:2)\n"
        "  hint: see 'kiln query --help'\n"
    )


def test_bad_rc_line_is_a_located_error(ws: Workspace) -> None:
    ws.write(".kilnrc", "qeury --output=json\n")
    result = ws.kiln("query", "//lib")
    assert result.code == 1
    assert result.err.startswith(f"ERROR: {ws.root / '.kilnrc'}:1: unknown command 'qeury'")


def test_verbose_failures_from_the_rc_file_shows_the_starlark_stack(
    ws: Workspace,
) -> None:
    ws.write("bad/BUILD", "filegroup(name = 1)\n")
    assert "Traceback" not in ws.kiln("query", "//bad:all").err
    ws.write(".kilnrc", "query --verbose_failures\n")
    result = ws.kiln("query", "//bad:all")
    assert result.code == 1
    assert "* bad/BUILD:1, in <module>" in result.err  # the Starlark stack, not Python's


def test_undecodable_kilnignore_is_a_user_error(ws: Workspace) -> None:
    (ws.root / ".kilnignore").write_bytes(b"\xff\n")
    result = ws.kiln("query", "//...")
    assert result.code == 1
    assert result.err.startswith(f"ERROR: cannot read {ws.root / '.kilnignore'}: 'utf-8' codec")
