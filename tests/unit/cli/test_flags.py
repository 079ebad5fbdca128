"""The flag table (kiln/cli/flags.py): every command's options, BuildOptions, the records
below the CLI, `.kilnrc` handling and `kiln help` are made from its rows."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import click
import pytest
from kiln.cli import flags, rcfile
from kiln.cli.build_options import BuildOptions
from kiln.cli.commands import COMMANDS, Command
from kiln.cli.help import command_help
from kiln.errors import Location
from kiln.exec.executor import ExecOptions
from kiln.exec.scheduler import Limits

from tests.kiln_workspace import MakeWorkspace, Workspace

# -- the table -----------------------------------------------------------------


def test_no_flag_is_declared_twice() -> None:
    names = [flag.name for flag in flags.FLAGS]
    assert len(names) == len(set(names))
    spellings = [s for flag in flags.FLAGS for s in flag.spellings]
    assert len(spellings) == len(set(spellings))  # nor a --noX that is another flag's name


def test_every_row_has_help_a_group_and_commands_that_exist() -> None:
    known = {command.name for command in COMMANDS}
    for flag in flags.FLAGS:
        assert flag.help.strip(), f"--{flag.name} has no help"
        assert flag.group in flags.GROUPS
        assert flag.commands and set(flag.commands) <= known, flag.name


def test_a_row_of_an_unknown_group_is_refused() -> None:
    with pytest.raises(ValueError, match="flag --x: unknown group 'misc'"):
        flags.Flag("x", "help", "misc")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_every_option_of_a_command_is_a_row_with_the_tables_default_and_type(
    command: Command,
) -> None:
    options = [p for p in command.load().params if isinstance(p, click.Option)]
    declared = {
        opt.lstrip("-") for option in options for opt in option.opts if opt.startswith("--")
    }
    assert declared == {flag.name for flag in flags.flags_of(command.name)}
    for option in options:
        flag = flags.BY_NAME[option.opts[0].lstrip("-")]
        assert option.default == flag.default, flag.name
        assert option.help == flag.help
        assert option.multiple == (flag.kind == "repeated")
        if flag.type is not None:
            assert option.type is flag.type


def test_the_query_formats_and_digest_functions_are_those_of_the_code() -> None:
    from kiln.cache.digest import DIGEST_FUNCTIONS
    from kiln.query.output import FORMATS

    output_type = flags.BY_NAME["output"].type
    digest_type = flags.BY_NAME["digest_function"].type
    assert isinstance(output_type, click.Choice) and isinstance(digest_type, click.Choice)
    assert tuple(output_type.choices) == FORMATS
    assert tuple(digest_type.choices) == DIGEST_FUNCTIONS


def test_disk_cache_is_one_row_taken_by_build_clean_and_info() -> None:
    """It was declared three times, with three help texts."""
    assert flags.BY_NAME["disk_cache"].commands == ("build", "clean", "info", "test")
    helps = {
        option.help
        for command in COMMANDS
        for option in command.load().params
        if option.name == "disk_cache" and isinstance(option, click.Option)
    }
    assert helps == {flags.BY_NAME["disk_cache"].help}


# -- BuildOptions ----------------------------------------------------------------


def test_build_options_has_one_field_per_build_row_and_no_defaults_of_its_own() -> None:
    fields = dataclasses.fields(BuildOptions)
    assert {f.name for f in fields} == {flag.name for flag in flags.flags_of("build")}
    assert all(f.default is dataclasses.MISSING for f in fields)


def test_build_options_defaults_are_the_tables() -> None:
    options = BuildOptions.defaults(jobs=3)
    assert options.jobs == 3
    assert options.remote_timeout == 60.0
    assert options.digest_function == "sha256"
    assert options.worker_max_instances == 2


# -- slices: the records below the CLI, filled by field name ---------------------


@dataclass(frozen=True)
class RemoteOptions:
    """As the remote providers' options record is to be: fields named like the flags."""

    remote_cache: str | None
    remote_header: tuple[str, ...]
    remote_timeout: float
    remote_instance_name: str
    remote_min_rate: str
    remote_retries: int


def test_a_slice_fills_a_record_from_the_same_named_flags() -> None:
    options = BuildOptions.defaults(remote_cache="http://cache:8080", remote_header=("A=b",))
    assert options.slice(RemoteOptions) == RemoteOptions(
        remote_cache="http://cache:8080",
        remote_header=("A=b",),
        remote_timeout=60.0,
        remote_instance_name="",
        remote_min_rate="1M",
        remote_retries=2,
    )


def test_a_slice_refuses_a_field_no_flag_provides() -> None:
    @dataclass(frozen=True)
    class Misspelt:
        remote_timout: float
        remote_cache: str | None = None

    with pytest.raises(TypeError, match=r"^Misspelt: no flag provides remote_timout; rename"):
        BuildOptions.defaults().slice(Misspelt)


def test_a_slice_refuses_a_mapping_for_a_field_the_record_lacks() -> None:
    with pytest.raises(TypeError, match=r"^Limits has no field memory$"):
        BuildOptions.defaults().slice(Limits, renamed={"memory": "local_ram_mb"})


def test_a_slice_takes_renamed_given_unset_and_record_default_fields() -> None:
    @dataclass(frozen=True)
    class Record:
        memory_mb: int | None
        jobs: int | None
        python: str
        preload: tuple[str, ...] = ("torch",)

    options = BuildOptions.defaults(local_ram_mb=512)
    record = options.slice(
        Record,
        renamed={"memory_mb": "local_ram_mb"},
        given={"python": "/usr/bin/python3"},
        when_unset={"jobs": lambda: 7, "memory_mb": lambda: 1},
        record_defaults=("preload",),
    )
    assert record == Record(memory_mb=512, jobs=7, python="/usr/bin/python3")


def test_exec_options_defaults_agree_with_the_table() -> None:
    """ExecOptions keeps defaults (tests build it directly); they may not drift."""
    for field in dataclasses.fields(ExecOptions):
        if field.name in flags.BY_NAME and field.name != "strategy":  # not --strategy's list
            assert field.default == flags.BY_NAME[field.name].default, field.name


def test_limits_are_a_slice_with_the_host_filling_unset_flags() -> None:
    options = BuildOptions.defaults(jobs=4, local_ram_mb=100)
    limits = options.slice(
        Limits, renamed={"memory_mb": "local_ram_mb"}, when_unset={"gpus": lambda: 1}
    )
    assert limits == Limits(jobs=4, gpus=1, memory_mb=100)


# -- .kilnrc and kiln help read the table ---------------------------------------

_SAMPLE = {"value": "1", "repeated": "1"}


@pytest.mark.parametrize("flag", flags.FLAGS, ids=lambda f: f.name)
def test_a_common_rc_flag_reaches_exactly_the_commands_taking_it(flag: flags.Flag) -> None:
    where = Location(".kilnrc", 1)
    words = [f"--{flag.name}", *([_SAMPLE[flag.kind]] if flag.takes_value else [])]
    lines = [rcfile.RcLine("common", None, tuple(words), where)]
    for command in COMMANDS:
        kept = [
            a.text for a in rcfile.for_command(command.name, rcfile.expand(command.name, [], lines))
        ]
        assert kept == (words if command.name in flag.commands else []), command.name


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_kiln_help_shows_every_flag_of_a_command_under_its_group(command: Command) -> None:
    text = command_help(command)
    sections = text.split("\n\n")
    for flag in flags.flags_of(command.name):
        title = f"{flag.group.capitalize()} options:"
        section = next(s for s in sections if s.startswith(title))
        assert f"--{flag.name}" in section, (command.name, flag.name)


def test_an_option_of_another_command_names_that_command(ws: Workspace) -> None:
    ws.write(".kilnrc", "clean --jobs=2\n")
    result = ws.kiln("clean")
    assert (result.code, result.err) == (
        1,
        f"ERROR: unknown option '--jobs' for 'kiln clean' (from {ws.root / '.kilnrc'}:1)\n"
        "  hint: --jobs is an option of kiln build, kiln test; see 'kiln clean --help'\n",
    )


@pytest.fixture
def ws(make_workspace: MakeWorkspace) -> Workspace:
    return make_workspace({"app/BUILD": 'filegroup(name = "app")\n'})


def test_an_rc_option_no_command_takes_is_an_error_even_on_a_common_line(ws: Workspace) -> None:
    """It used to be dropped by every command: a typo that silently did nothing."""
    ws.write(".kilnrc", "common --keep_going --jbos=2\n")
    result = ws.kiln("query", "//app")
    assert (result.code, result.err) == (
        1,
        f"ERROR: unknown option '--jbos' (from {ws.root / '.kilnrc'}:1): no kiln command "
        "takes it\n  hint: did you mean '--jobs'? see 'kiln help <command>' for its options\n",
    )


def test_a_bare_word_after_a_switch_on_an_inherited_line_is_dropped() -> None:
    """`--keep_going` takes no value: the word after it is none of its."""
    where = Location(".kilnrc", 1)
    words = ("--keep_going", "stray", "-j4", "-j", "2", "--output", "json")
    lines = [rcfile.RcLine("common", None, words, where)]
    build = [a.text for a in rcfile.for_command("build", rcfile.expand("build", [], lines))]
    query = [a.text for a in rcfile.for_command("query", rcfile.expand("query", [], lines))]
    assert (build, query) == (["--keep_going", "-j4", "-j", "2"], ["--output", "json"])
