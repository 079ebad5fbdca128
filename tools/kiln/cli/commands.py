"""The one table of kiln's commands: main(), the rc-file reader and `kiln help` read it.

Each command lives in its own module under kiln.cli, defining `command` (a
click.Command), imported only when that command runs. `inherits` names the
commands whose rc-file options it also takes, most general first, as in
Bazel (`clean` and `info` take `build` lines); an inherited option the
command does not know is dropped for it, as a `common` one is.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import click


class Command(NamedTuple):  # a NamedTuple: read at every start, and cheaper to define
    name: str
    module: str  # under kiln.cli
    help: str  # one line, for `kiln help`
    inherits: tuple[str, ...] = ()

    def load(self) -> click.Command:
        command: click.Command = importlib.import_module(f"kiln.cli.{self.module}").command
        return command


COMMANDS: tuple[Command, ...] = (
    Command("build", "build", "Build the given targets (kiln build //models:resnet_pt2)"),
    Command(
        "test",
        "test",
        "Build the given targets and run the tests among them (kiln test //...)",
        ("build",),
    ),
    Command("query", "query", "Query the target graph (kiln query 'deps(//models:resnet_pt2)')"),
    Command(
        "clean", "clean", "Remove kiln-out/ (--expunge: this workspace's state too)", ("build",)
    ),
    Command("info", "info", "Print workspace paths and the detected toolchains", ("build",)),
    Command(
        "report",
        "report",
        "Write the HTML report of the last build or test (kiln report [FILE.html])",
    ),
    Command("worker", "worker", "Run actions for a REAPI server (kiln worker --reapi grpc://...)"),
)
BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}


def did_you_mean(word: str, choices: Iterable[str], then: str = "") -> str:
    """A hint for a mistyped name: "did you mean 'build'? " (when one of `choices` is
    close) followed by `then`."""
    import difflib  # only on an error

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return " ".join(filter(None, [f"did you mean '{close[0]}'?" if close else "", then]))
