"""The kiln command line: `kiln [startup options] <command> [options] [targets]`.

main() finds the command in the table (commands.py), the workspace, reads
the rc files, expands `--config`, and hands the arguments to the command's
click implementation. Every command module is imported only when it runs,
so `kiln query` never loads the executor, and nothing here imports torch.

Exit codes: 0 success, 1 a user error, a failed build or a file system in
the way (os_errors.py), 2 a bug in kiln (with a traceback), 8 interrupted
(Ctrl-C), as Bazel's.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import click

from kiln.cli import flags, rcfile
from kiln.cli.commands import BY_NAME, did_you_mean
from kiln.cli.session import Session, StartupOptions
from kiln.errors import KilnError
from kiln.loading.workspace import Workspace

EXIT_USER_ERROR = 1
EXIT_BUG = 2
EXIT_INTERRUPTED = 8


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    reporting = _Reporting(verbose="--verbose_failures" in args)
    try:
        return _run(args, reporting)
    except KilnError as error:
        click.echo(f"ERROR: {error.format(verbose=reporting.verbose)}", err=True)
        return EXIT_USER_ERROR
    except click.ClickException as error:
        click.echo(f"ERROR: {error.format_message()}", err=True)
        return EXIT_USER_ERROR
    except (KeyboardInterrupt, click.exceptions.Abort):
        # click turns a Ctrl-C inside a command into Abort: the same interrupt.
        click.echo("\nkiln: interrupted", err=True)
        return EXIT_INTERRUPTED
    except OSError as error:
        from kiln.cli.os_errors import environment_error

        environment = environment_error(error)
        if environment is None:
            return _bug()
        click.echo(f"ERROR: {environment.format(verbose=reporting.verbose)}", err=True)
        return EXIT_USER_ERROR
    except Exception:
        return _bug()


def _bug() -> int:
    click.echo("INTERNAL ERROR: kiln crashed; this is a bug in kiln:", err=True)
    traceback.print_exc()
    return EXIT_BUG


@dataclass
class _Reporting:
    """How main() reports a KilnError; set again once the rc files are read,
    so that `query --verbose_failures` in a .kilnrc counts too."""

    verbose: bool


def _run(args: list[str], reporting: _Reporting) -> int:
    startup, rest_args = StartupOptions.parse(args)
    startup_words, args = args[: len(args) - len(rest_args)], rest_args
    if not args or args[0] in ("help", "-h", "--help"):
        from kiln.cli.help import help_text

        if len(args) > 2:
            raise KilnError("'kiln help' takes at most one name", hint="kiln help build")
        click.echo(help_text(args[1] if len(args) == 2 and args[0] == "help" else None), nl=False)
        return 0
    if args[0] in ("version", "--version"):
        from kiln import __version__

        click.echo(f"kiln {__version__}")
        return 0
    name, rest = args[0], args[1:]
    info = BY_NAME.get(name)
    if info is None:
        raise KilnError(
            f"unknown command '{name}'",
            hint=did_you_mean(name, BY_NAME, f"commands: {', '.join(BY_NAME)}; see 'kiln help'"),
        )
    if "--help" in rest:  # needs no workspace
        from kiln.cli.help import command_help

        click.echo(command_help(info), nl=False)
        return 0
    command = info.load()
    cwd = _cwd()
    workspace = Workspace.find(cwd)
    files = rcfile.rc_files(
        workspace.root, workspace_rc=startup.workspace_rc, home_rc=startup.home_rc
    )
    lines = [line for path in files for line in rcfile.read(path, workspace.root)]
    session = Session.create(cwd, _with_rc_startup(startup, startup_words, lines))
    expanded = rcfile.expand(name, rest, lines)
    words = rcfile.for_command(name, expanded)
    reporting.verbose = any(a.text == "--verbose_failures" for a in words)
    try:
        result = command.main(
            [a.text for a in words], prog_name=f"kiln {name}", standalone_mode=False, obj=session
        )
    except click.NoSuchOption as error:
        origin = next((a.origin for a in words if a.text.split("=")[0] == error.option_name), None)
        where = f" (from {origin})" if origin else ""
        raise KilnError(
            f"unknown option '{error.option_name}' for 'kiln {name}'{where}",
            hint=_unknown_option_hint(error.option_name, name),
        ) from None
    except click.ClickException as error:
        raise KilnError(f"kiln {name}: {error.format_message()}") from None
    return int(result or 0)


def _with_rc_startup(
    given: StartupOptions, words: list[str], lines: list[rcfile.RcLine]
) -> StartupOptions:
    """The startup options of the rc files' `startup` lines, then the command line's over
    them (which rc files are read is the command line's alone)."""
    rc = rcfile.startup_args(lines)
    if not rc:
        return given
    options = StartupOptions()
    for arg in rc:
        if arg.text.split("=")[0] in (
            "--workspace_rc",
            "--noworkspace_rc",
            "--home_rc",
            "--nohome_rc",
        ):
            raise KilnError(
                f"'{arg.text}' cannot be set in an rc file ({arg.origin}): it decides which "
                "rc files are read",
                hint="give it on the command line, before the command",
            )
        options, _ = StartupOptions.parse([arg.text], options, where=f"from {arg.origin}")
    options, _ = StartupOptions.parse(words, options)
    return options


def _cwd() -> Path:
    try:
        return Path(os.getcwd())
    except FileNotFoundError:
        where = os.environ.get("PWD")
        raise KilnError(
            "the current directory" + (f" {where}" if where else "") + " no longer exists",
            hint="cd into the workspace again (a directory made anew under the same name "
            "is another directory)",
        ) from None


def _unknown_option_hint(option: str, command: str) -> str:
    """A close match among the command's flags, or the commands that take the flag."""
    takers = next((flag.commands for flag in flags.FLAGS if option in flag.spellings), ())
    if takers:
        return (
            f"{option} is an option of {', '.join(f'kiln {c}' for c in takers)}; "
            f"see 'kiln {command} --help'"
        )
    return did_you_mean(option, flags.by_spelling(command), f"see 'kiln {command} --help'")
