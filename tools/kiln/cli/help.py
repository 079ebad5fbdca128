"""`kiln help [NAME]`: the command list, one command's options, or one rule's attributes.

Needs no workspace. A NAME that is not a command is looked up in the rule
catalogue (kiln.rules); only then are the rules (and pydantic) imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from kiln.cli.commands import BY_NAME, COMMANDS, Command, did_you_mean
from kiln.errors import KilnError

if TYPE_CHECKING:
    from kiln.rule_api import Rule

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
    from kiln.rules import CATALOGUE, load_rule

    if name in CATALOGUE:
        return rule_help(load_rule(name))
    raise KilnError(
        f"no command or rule named '{name}'",
        hint=did_you_mean(name, [*BY_NAME, *CATALOGUE], "see 'kiln help' for the commands"),
    )


def rule_help(rule: Rule) -> str:
    """A rule's doc and its attributes: name, type, default, description.

    The hook for rule documentation: attributes print the `description` of
    their pydantic Field (`Field(description=...)`), where the rule gives one.
    """
    lines = [f"{rule.name}: {rule.doc.strip()}", "", "Attributes:"]
    for name, field in rule.attrs.model_fields.items():
        kind = _type_name(field.annotation)
        default = "required" if field.is_required() else f"default {_default(field)}"
        lines.append(f"  {name} ({kind}, {default})")
        if field.description:
            lines.append(f"      {field.description}")
    return "\n".join(lines) + "\n"


def _type_name(annotation: Any) -> str:
    if getattr(annotation, "__args__", None):  # list[str], str | None, dict[str, int]
        return str(annotation).replace("typing.", "")
    return str(getattr(annotation, "__name__", annotation))


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return repr(field.default_factory())
    return repr(field.default)
