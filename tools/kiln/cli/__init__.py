"""The kiln command line: `kiln [startup options] <command> [options] [targets]`.

main() finds the workspace, reads the rc files, expands `--config`, and
hands the arguments to the command's click implementation. Every command
module is imported only when it runs, so `kiln query` never loads the
executor, and nothing here imports torch.

Exit codes: 0 success, 1 a user error or a failed build, 2 a bug in kiln
(with a traceback), 8 interrupted, as Bazel's.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import click

from kiln.cli import rcfile
from kiln.cli.session import Session, StartupOptions
from kiln.errors import KilnError

# command -> module under kiln.cli that defines `command` (a click.Command)
COMMANDS: dict[str, str] = {
    "build": "build",
    "query": "query",
    "clean": "clean",
    "info": "info",
}
EXIT_USER_ERROR = 1
EXIT_BUG = 2
EXIT_INTERRUPTED = 8

USAGE = """Usage: kiln [startup options] <command> [options] [targets]

Commands:
  build    Build the given targets (kiln build //models:resnet_pt2)
  query    Query the target graph (kiln query 'deps(//models:resnet_pt2)')
  clean    Remove kiln-out/ (--expunge: the caches too)
  info     Print workspace paths and the detected toolchains

Startup options: --noworkspace_rc --nohome_rc --output_base=DIR
Run 'kiln <command> --help' for the options of a command.
"""


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
    except KeyboardInterrupt:
        click.echo("\nkiln: interrupted", err=True)
        return EXIT_INTERRUPTED
    except Exception:
        click.echo("INTERNAL ERROR: kiln crashed; this is a bug in kiln:", err=True)
        traceback.print_exc()
        return EXIT_BUG


@dataclass
class _Reporting:
    """How main() reports a KilnError; set again once the rc files are read,
    so that `query --verbose_failures` in a .kilnrc counts too."""

    verbose: bool


def _run(args: list[str], reporting: _Reporting) -> int:
    startup, args = StartupOptions.parse(args)
    if not args or args[0] in ("help", "-h", "--help"):
        click.echo(USAGE)
        return 0
    if args[0] in ("version", "--version"):
        from kiln import __version__

        click.echo(f"kiln {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        raise KilnError(
            f"unknown command '{name}'",
            hint=f"commands: {', '.join(COMMANDS)}; see 'kiln help'",
        )
    command: click.Command = importlib.import_module(f"kiln.cli.{COMMANDS[name]}").command
    session = Session.create(Path(os.getcwd()), startup)
    files = rcfile.rc_files(
        session.workspace.root, workspace_rc=startup.workspace_rc, home_rc=startup.home_rc
    )
    lines = [line for path in files for line in rcfile.read(path, session.workspace.root)]
    expanded = rcfile.expand(name, rest, lines)
    words = _drop_unknown_common(command, expanded)
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
            hint=f"see 'kiln {name} --help'",
        ) from None
    except click.ClickException as error:
        raise KilnError(f"kiln {name}: {error.format_message()}") from None
    return int(result or 0)


def _drop_unknown_common(command: click.Command, args: list[rcfile.Arg]) -> list[rcfile.Arg]:
    """`common` options the command does not know, dropped with their values.

    On a `common` line, a word that is no option and follows an option written
    without `=` is that option's value: `common --output json` is one option.
    """
    known = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}
    kept: list[rcfile.Arg] = []
    keep = True
    for i, arg in enumerate(args):
        if not arg.common:
            kept.append(arg)
            continue
        previous = args[i - 1] if i else None
        is_value = (
            not arg.text.startswith("-")
            and previous is not None
            and previous.common
            and previous.origin == arg.origin
            and previous.text.startswith("-")
            and "=" not in previous.text
        )
        if not is_value:
            keep = arg.text.split("=")[0] in known
        if keep:
            kept.append(arg)
    return kept
