"""`kiln help [NAME]`: the command list, one command's options, or one rule's attributes.

Needs no workspace. A NAME that is not a command is looked up in the rule
catalogue (rule_help.py renders it); only then are the rules (and pydantic)
imported.
"""

from __future__ import annotations

import click

from kiln.cli.commands import BY_NAME, COMMANDS, Command, did_you_mean
from kiln.errors import KilnError

STARTUP_OPTIONS = "--noworkspace_rc --nohome_rc --output_base=DIR"


def usage() -> str:
    width = max(len(c.name) for c in COMMANDS) + 4
    lines = [
        "Usage: kiln [startup options] <command> [options] [targets]",
        "",
        "Commands:",
        *(f"  {c.name:<{width}}{c.help}" for c in COMMANDS),
        "",
        f"Startup options: {STARTUP_OPTIONS}",
        "Run 'kiln help <command>' for the options of a command, "
        "'kiln help <rule>' for the attributes of a rule.",
    ]
    return "\n".join(lines) + "\n"


def command_help(command: Command) -> str:
    click_command = command.load()
    with click.Context(click_command, info_name=f"kiln {command.name}") as context:
        return click_command.get_help(context) + "\n"


def help_text(name: str | None) -> str:
    """What `kiln help NAME` prints; KilnError for a name that is neither command nor rule."""
    if name is None:
        return usage()
    if name in BY_NAME:
        return command_help(BY_NAME[name])
    from kiln.cli import rule_help  # the rules, and pydantic, only for a rule's help

    text = rule_help.describe(name)
    if text is not None:
        return text
    raise KilnError(
        f"no command or rule named '{name}'",
        hint=did_you_mean(
            name, [*BY_NAME, *rule_help.rule_names()], "see 'kiln help' for the commands"
        ),
    )
