"""`.kilnrc` files, read the way Bazel reads `.bazelrc`.

Each line is `command[:config] args...`; `#` starts a comment; `import PATH`
and `try-import PATH` pull in other files (`%workspace%` names the root).
Options of `command` apply to that command and to the commands inheriting
from it (`clean` and `info` from `build`: the table in commands.py);
`common` lines apply to every command. A command silently ignores the
inherited and `common` options it does not take (which command takes which
flag is the flag table's, flags.py); an option on its own lines it does not
take, or one no command takes on any line, is an error. Lines with a
`:config` apply only when `--config=config` is given, at the place it is given.

Files read, in order (later ones win): `<workspace>/.kilnrc`, `~/.kilnrc`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kiln.cli import flags
from kiln.cli.commands import BY_NAME, did_you_mean
from kiln.errors import KilnError, Location
from kiln.file_io import read_text


class RcError(KilnError):
    pass


@dataclass(frozen=True)
class RcLine:
    command: str
    config: str | None
    args: tuple[str, ...]
    location: Location


@dataclass(frozen=True)
class Arg:
    """One command-line word, and where it came from (None: the command line)."""

    text: str
    origin: Location | None = None
    # From a `common` line or an inherited command's line: dropped if the command
    # does not know it.
    inherited: bool = False


# `startup --output_base=DIR`: startup options, as if given before the command.
STARTUP = "startup"


def startup_args(lines: list[RcLine]) -> list[Arg]:
    """The words of the `startup` lines, in order (the command line's come after)."""
    return [
        Arg(word, line.location) for line in lines if line.command == STARTUP for word in line.args
    ]


def read(path: Path, workspace: Path | None, *, _seen: tuple[Path, ...] = ()) -> list[RcLine]:
    if path.resolve() in [seen.resolve() for seen in _seen]:
        raise RcError(f"rc file {path} imports itself (through {' -> '.join(map(str, _seen))})")
    try:
        text = read_text(path)
    except OSError as error:
        raise RcError(f"cannot read rc file {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise RcError(f"cannot read rc file {path}: {error}") from None
    lines: list[RcLine] = []
    for number, raw in enumerate(_logical_lines(text), start=1):
        if raw is None:
            continue
        location = Location(str(path), number)
        try:
            words = shlex.split(raw, comments=True)
        except ValueError as error:
            raise RcError(f"cannot parse this line: {error}", location=location) from None
        if not words:
            continue
        head, rest = words[0], tuple(words[1:])
        if head in ("import", "try-import"):
            if len(rest) != 1:
                raise RcError(f"'{head}' takes exactly one path", location=location)
            target = _substitute(rest[0], workspace, location)
            if not target.is_file():
                if head == "try-import":
                    continue
                raise RcError(f"imported rc file {target} does not exist", location=location)
            lines += read(target, workspace, _seen=(*_seen, path))
            continue
        command, _, config = head.partition(":")
        if command not in BY_NAME and command not in ("common", STARTUP):
            known = ["common", STARTUP, *BY_NAME]
            raise RcError(
                f"unknown command '{command}' (known: {', '.join(known)})",
                location=location,
                hint=did_you_mean(command, known) or None,
            )
        if config == "" and ":" in head:
            raise RcError(f"empty config name in '{head}'", location=location)
        if command == STARTUP and config:
            raise RcError("'startup' lines take no :config, as in Bazel", location=location)
        lines.append(RcLine(command, config or None, rest, location))
    return lines


def _logical_lines(text: str) -> Iterable[str | None]:
    """Lines with backslash continuations joined; None keeps physical line numbers."""
    pending = ""
    for line in text.splitlines():
        if line.endswith("\\"):
            pending += line[:-1] + " "
            yield None
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _substitute(path: str, workspace: Path | None, location: Location) -> Path:
    if "%workspace%" in path:
        if workspace is None:
            raise RcError("%workspace% used outside a workspace", location=location)
        path = path.replace("%workspace%", str(workspace))
    return Path(os.path.expanduser(path))


def rc_files(workspace: Path | None, *, workspace_rc: bool, home_rc: bool) -> list[Path]:
    files: list[Path] = []
    if workspace_rc and workspace is not None and (workspace / ".kilnrc").is_file():
        files.append(workspace / ".kilnrc")
    home = Path(os.path.expanduser("~")) / ".kilnrc"
    if home_rc and home.is_file() and home not in files:
        files.append(home)
    return files


def expand(command: str, cli_args: list[str], lines: list[RcLine]) -> list[Arg]:
    """The command's full argument list: rc options first, then the command line.

    Every `--config=NAME` (from the command line or an rc line) is replaced,
    where it stands, by the options of the `cmd:NAME` lines.
    """
    info = BY_NAME.get(command)
    applicable = ("common", *(info.inherits if info else ()), command)

    def lines_for(config: str | None) -> list[RcLine]:
        return [ln for ln in lines if ln.command in applicable and ln.config == config]

    def expand_words(words: Iterable[Arg], stack: tuple[str, ...]) -> list[Arg]:
        out: list[Arg] = []
        words = list(words)
        i = 0
        while i < len(words):
            word = words[i]
            name: str | None = None
            if word.text.startswith("--config="):
                name = word.text.split("=", 1)[1]
            elif word.text == "--config" and i + 1 < len(words):
                i += 1
                name = words[i].text
            if name is None:
                out.append(word)
            else:
                out += expand_config(name, word.origin, stack)
            i += 1
        return out

    def expand_config(name: str, origin: Location | None, stack: tuple[str, ...]) -> list[Arg]:
        if name in stack:
            raise RcError(
                f"config '{name}' expands to itself ({' -> '.join([*stack, name])})",
                location=origin,
            )
        selected = lines_for(name)
        if not selected:
            raise RcError(
                f"config value '{name}' is not defined in any .kilnrc file "
                f"for the '{command}' command",
                location=origin,
                hint=f"add a line such as '{command}:{name} --keep_going' to .kilnrc",
            )
        return expand_words(_args(selected, command), (*stack, name))

    base = expand_words(_args(lines_for(None), command), ())
    return base + expand_words((Arg(a) for a in cli_args), ())


def _args(lines: list[RcLine], command: str) -> list[Arg]:
    return [Arg(a, ln.location, ln.command != command) for ln in lines for a in ln.args]


def for_command(command: str, args: list[Arg]) -> list[Arg]:
    """The words `command` gets (expand()'s): the inherited and `common` rc options
    it does not take (the flag table, flags.py, says which), dropped with
    their values, as Bazel drops them: `build --jobs=2` never breaks `kiln clean`.

    On such a line, the word after a flag written without `=` is its value when the
    flag table says the flag takes one (`common --output json` is one option). An
    option no command takes is an error wherever it is written, as in Bazel: on a
    `common` line it would otherwise be dropped by every command, a typo never seen.
    """
    known = flags.by_spelling(command)
    every = {spelling: flag for flag in flags.FLAGS for spelling in flag.spellings}
    kept: list[Arg] = []
    keep = True
    for i, arg in enumerate(args):
        if not arg.inherited:
            kept.append(arg)
            continue
        if arg.text.startswith("-"):
            name = arg.text.split("=")[0]
            if not name.startswith("--"):
                name = name[:2]  # -j4: a short flag, its value attached
            if name not in every:
                raise RcError(
                    f"unknown option '{name}' (from {arg.origin}): no kiln command takes it",
                    hint=did_you_mean(name, every, "see 'kiln help <command>' for its options"),
                )
            keep = name in known
        else:
            previous = args[i - 1] if i else None
            keep = keep and (  # the value of the flag before it, kept or dropped with it
                previous is not None
                and previous.inherited
                and previous.origin == arg.origin
                and previous.text in every
                and _takes_value(every[previous.text], previous.text)
            )
        if keep:
            kept.append(arg)
    return kept


def _takes_value(flag: flags.Flag, spelling: str) -> bool:
    """Whether `spelling`, written without `=`, takes the next word (--noX never does)."""
    return flag.takes_value and spelling in (f"--{flag.name}", flag.short)
