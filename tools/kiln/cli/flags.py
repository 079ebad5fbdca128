"""The one table of kiln's command-line flags: each flag is one row.

A row says everything about a flag once: its name, how its value is parsed and
checked (a click type), its default, its help, its group (how `kiln help`
sorts it) and which commands take it. Everything else is made from the table:

- the click options of every command (`@flags.options("build")`), so a flag
  taken by three commands (`--disk_cache`) is declared once, with one help;
- the frozen `BuildOptions` a build reads (its fields are the `build` rows;
  tests/unit/cli/test_flags.py holds them together);
- the records below the CLI, by field name (`slice_options`): ExecOptions,
  Limits, the remote options a node gets; no default is written again there;
- main()'s handling of `.kilnrc` lines (which flags a command takes, which take
  a value) and `kiln help`'s sections.

Flags are spelled as Bazel spells them: `--name=value`, booleans as
`--name/--noname`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, TypeVar, Unpack

import click

from kiln.layout import DEFAULT_DIGEST_FUNCTION

# How a flag is written: `value` takes one (--jobs=4), `switch` is a boolean with a
# negation (--sandbox/--nosandbox), `flag` a boolean without one (--expunge),
# `repeated` takes one value each time it is given (--action_env=A --action_env=B).
Kind = Literal["value", "switch", "flag", "repeated"]

# `kiln help <command>` prints a command's flags in these sections, in this order.
GROUPS = (
    "clean",  # a command's own flags first
    "test",
    "execution",
    "cache",
    "remote cache",
    "remote execution",
    "worker",
    "output",
    "workspace",
)


@dataclass(frozen=True)
class Flag:
    name: str  # without dashes; also the field of BuildOptions and of every slice
    help: str
    group: str
    commands: tuple[str, ...] = ("build",)
    kind: Kind = "value"
    type: click.ParamType[Any, Any] | None = None  # parses and checks the value; None: a string
    default: Any = None
    short: str | None = None  # -j
    metavar: str | None = None
    show_default: bool = False  # "[default: ...]" in the help, from `default`
    dest: str | None = None  # the click parameter's name, where it is not `name`

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"flag --{self.name}: unknown group '{self.group}'")
        extended = tuple(c for c, base in EXTENDS.items() if base in self.commands)
        if extended and not set(extended) <= set(self.commands):  # a build flag: test's too
            object.__setattr__(self, "commands", (*self.commands, *extended))

    @property
    def spellings(self) -> tuple[str, ...]:
        """How the flag may be written on a command line or an rc line."""
        negated = (f"--no{self.name}",) if self.kind == "switch" else ()
        return (f"--{self.name}", *negated, *((self.short,) if self.short else ()))

    @property
    def takes_value(self) -> bool:
        return self.kind in ("value", "repeated")

    def click_option(self) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        declared = f"--{self.name}/--no{self.name}" if self.kind == "switch" else f"--{self.name}"
        names = [
            declared,
            *((self.short,) if self.short else ()),
            *((self.dest,) if self.dest else ()),
        ]
        extra: dict[str, Any] = {}
        if self.kind == "flag":
            extra["is_flag"] = True
        if self.kind == "repeated":
            extra["multiple"] = True
        if self.type is not None:
            extra["type"] = self.type
        if self.metavar is not None:
            extra["metavar"] = self.metavar
        return click.option(
            *names,
            default=self.default,
            show_default=self.show_default or None,  # None: click's own choice, as before
            help=self.help,
            **extra,
        )


# Commands that take every flag of another besides their own rows, as Bazel's `test` takes
# `build`'s: command -> the command whose rows it also takes (so a new build flag is a test
# flag too, with no row to edit). Flag.commands holds both.
EXTENDS: dict[str, str] = {"test": "build"}

_STRATEGIES = ["worker", "local", "remote", "dynamic"]

FLAGS: tuple[Flag, ...] = (
    # -- execution: what runs, where and how much at once
    Flag(
        "jobs",
        "Actions run at once [default: number of cores]",
        "execution",
        type=click.IntRange(min=1),
        short="-j",
    ),
    Flag(
        "gpus",
        "GPUs actions may use, each action its own [default: detected from "
        "CUDA_VISIBLE_DEVICES or nvidia-smi]",
        "execution",
        commands=("build", "info"),
        type=click.IntRange(min=0),
    ),
    Flag(
        "local_ram_mb",
        "Memory budget for actions' memory hints [default: 2/3 of RAM]",
        "execution",
        type=click.IntRange(min=0),
    ),
    Flag(
        "keep_going",
        "Build as much as possible after a failure",
        "execution",
        kind="switch",
        default=False,
        short="-k",
    ),
    Flag(
        "strategy",
        "worker (default) or local: run Python actions in persistent workers or as "
        "plain processes; remote or dynamic as --spawn_strategy; MNEMONIC=S for one "
        "mnemonic's actions (--strategy=TrtEngine=remote); repeatable",
        "execution",
        kind="repeated",
        default=(),
        metavar="[MNEMONIC=]worker|local|remote|dynamic",
    ),
    Flag(
        "spawn_strategy",
        "Where actions run: here (worker, local), on --remote_executor (remote), or "
        "both at once, the first success winning (dynamic) [default: remote only the "
        "actions this host cannot run: a GPU or a toolchain it lacks]",
        "execution",
        type=click.Choice(_STRATEGIES),
    ),
    Flag(
        "sandbox",
        "Run actions in a sandbox showing only their inputs and the toolchain "
        "(Linux user namespaces; elsewhere they run without one, with a warning)",
        "execution",
        kind="switch",
        default=True,
        show_default=True,
    ),
    Flag(
        "worker_max_instances",
        "Persistent workers at most",
        "execution",
        type=click.IntRange(min=1),
        default=2,
        show_default=True,
    ),
    Flag(
        "action_timeout",
        "Seconds an action may run before it is killed",
        "execution",
        type=click.FloatRange(min=0, min_open=True),
    ),
    Flag(
        "action_env",
        "NAME=VALUE (or NAME, taken from kiln's environment) added to every "
        "action's environment, and so to its key; repeatable",
        "execution",
        kind="repeated",
        default=(),
    ),
    Flag(
        "pip_find_links",
        "Make Python environments offline, from the wheels in DIR (pip --no-index "
        "--find-links); repeatable",
        "execution",
        kind="repeated",
        default=(),
        type=click.Path(path_type=Path),
        metavar="DIR",
    ),
    # -- the local cache
    Flag(
        "disk_cache",
        "Local cache directory, which the user's workspaces share (`kiln info disk_cache` "
        "prints it, `kiln clean --expunge_disk_cache` deletes it) [default: ~/.cache/kiln]",
        "cache",
        commands=("build", "clean", "info"),
        type=click.Path(path_type=Path),
    ),
    Flag(
        "disk_cache_max_size",
        "Collect the disk cache down to this size after the build (e.g. 20G)",
        "cache",
    ),
    Flag(
        "digest_function",
        "Hash of blobs and keys; each function keeps a disk cache of its own",
        "cache",
        type=click.Choice(["sha256", "blake3"]),
        default=DEFAULT_DIGEST_FUNCTION,
        show_default=True,
    ),
    # -- the remote cache (a Bazel HTTP cache)
    Flag(
        "remote_cache",
        "A Bazel HTTP cache, http(s)://host:port[/prefix] (nginx WebDAV, bazel-remote), or "
        "a Remote Execution API server, grpc(s)://host:port (BuildGrid, Buildbarn, ...)",
        "remote cache",
        metavar="URL",
    ),
    Flag(
        "remote_upload_local_results",
        "Upload the results of actions run here to the remote cache",
        "remote cache",
        kind="switch",
        default=True,
        show_default=True,
    ),
    Flag(
        "remote_accept_cached",
        "Use results found in the remote cache",
        "remote cache",
        kind="switch",
        default=True,
        show_default=True,
    ),
    Flag(
        "remote_header",
        "A header sent with every remote cache request (repeatable; e.g. for auth)",
        "remote cache",
        commands=("build", "worker"),
        kind="repeated",
        default=(),
        metavar="NAME=VALUE",
    ),
    Flag(
        "remote_timeout",
        "Seconds any wait for the remote cache or the cluster may take (connecting, a "
        "response, the next bytes) before building without it",
        "remote cache",
        commands=("build", "info", "worker"),
        type=click.FloatRange(min=0, min_open=True),
        default=60.0,
        show_default=True,
    ),
    Flag(
        "remote_min_rate",
        "Bytes per second a transfer must keep up with, after min(--remote_timeout, "
        "10 s) of grace (e.g. 256K)",
        "remote cache",
        default="1M",
        show_default=True,
        metavar="SIZE",
    ),
    Flag(
        "remote_instance_name",
        "The remote cache's instance: a path segment before ac/ and cas/ over HTTP, "
        "REAPI's instance_name over gRPC",
        "remote cache",
        commands=("build", "worker"),
        default="",
    ),
    Flag(
        "tls_certificate",
        "grpcs:// remotes: a PEM file of the roots the server's certificate must chain to "
        "[default: the system's]",
        "remote cache",
        default="",
        metavar="PATH",
    ),
    Flag(
        "tls_client_certificate",
        "grpcs:// remotes: this client's certificate chain (PEM), for mutual TLS",
        "remote cache",
        default="",
        metavar="PATH",
    ),
    Flag(
        "tls_client_key",
        "grpcs:// remotes: the private key of --tls_client_certificate (PEM)",
        "remote cache",
        default="",
        metavar="PATH",
    ),
    # -- remote execution (a Ray cluster, or a Remote Execution API server)
    Flag(
        "remote_executor",
        "A Ray cluster to run actions on (Ray Client address of its head), or a Remote "
        "Execution API server (grpc(s)://HOST:PORT); needs --remote_cache, through which "
        "inputs and outputs travel; `kiln info cluster` describes it",
        "remote execution",
        commands=("build", "info"),
        metavar="ray://HOST:PORT|grpc://HOST:PORT",
    ),
    Flag(
        "remote_default_exec_properties",
        "A platform property every action sent to a grpc:// executor carries, for the "
        "farm's routing (repeatable; e.g. pool=gpu)",
        "remote execution",
        kind="repeated",
        default=(),
        metavar="KEY=VALUE",
    ),
    Flag(
        "remote_local_fallback",
        "Run an action here when the remote executor cannot be reached (if this "
        "host can run it) instead of failing",
        "remote execution",
        kind="switch",
        default=False,
        show_default=True,
    ),
    Flag(
        "remote_retries",
        "Times a remote action is run again when its worker or node dies under it",
        "remote execution",
        type=click.IntRange(min=0),
        default=2,
        show_default=True,
    ),
    # -- kiln worker (a Remote Workers API bot)
    Flag(
        "reapi",
        "The REAPI server whose leases this worker runs",
        "worker",
        commands=("worker",),
        metavar="grpc://HOST:PORT",
    ),
    Flag(
        "property",
        "A platform property this worker advertises, which the server routes by "
        "(repeatable; e.g. gpu=h200)",
        "worker",
        commands=("worker",),
        kind="repeated",
        default=(),
        metavar="KEY=VALUE",
    ),
    # -- what is shown and written about the build
    Flag(
        "output",
        "label, label_kind, build (as written in BUILD files), json, graph (Graphviz DOT)",
        "output",
        commands=("query",),
        # kiln.query.output.FORMATS; a test holds them equal (the table is read at every
        # start, the query package only by `kiln query`)
        type=click.Choice(["label", "label_kind", "build", "json", "graph"]),
        default="label",
        show_default=True,
        dest="fmt",
    ),
    Flag(
        "explain",
        "Print why each executed action was not a cache hit",
        "output",
        kind="switch",
        default=False,
    ),
    Flag(
        "build_event_json_file",
        "Write build events, one JSON object per line",
        "output",
        type=click.Path(path_type=Path),
    ),
    Flag(
        "profile",
        "Write a Chrome trace of the build (chrome://tracing, Perfetto)",
        "output",
        type=click.Path(path_type=Path),
    ),
    Flag(
        "report",
        "Write the build report: one self-contained HTML file (artifact sizes, action "
        "timeline, cache hits and why actions ran, validation, test metrics, benchmark "
        "latencies); `kiln report FILE` writes it again for the last build or test",
        "output",
        type=click.Path(path_type=Path),
        metavar="FILE.html",
    ),
    Flag(
        "verbose_failures",
        "Show more detail on errors (the Starlark stack of a BUILD file's error, the "
        "traceback behind an action's)",
        "output",
        commands=("build", "query"),
        kind="flag",
        default=False,
    ),
    # -- the workspace
    Flag(
        "lock_wait",
        "Wait for another command holding the workspace lock",
        "workspace",
        commands=("build", "clean"),
        kind="switch",
        default=True,
    ),
    # -- kiln test (which takes every flag of kiln build besides: EXTENDS)
    Flag(
        "cache_test_results",
        "Serve a test's pass from the cache while nothing it read changed; "
        "--nocache_test_results runs every test again (a failure is never cached)",
        "test",
        commands=("test",),
        kind="switch",
        default=True,
        show_default=True,
    ),
    Flag(
        "runs_per_test",
        "Run each test N times, as N actions (not served from the cache when N > 1)",
        "test",
        commands=("test",),
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        metavar="N",
    ),
    Flag(
        "test_output",
        "summary: a status line per test; errors: also the log of each failed test; "
        "all: the log of every test run",
        "test",
        commands=("test",),
        type=click.Choice(["summary", "errors", "all"]),
        default="summary",
        show_default=True,
    ),
    Flag(
        "test_filter",
        "Passed to each test as TESTBRIDGE_TEST_ONLY (the test framework picks the cases)",
        "test",
        commands=("test",),
    ),
    Flag(
        "test_timeout",
        "Seconds every test may run before it is killed (TIMEOUT) [default: by the "
        "test's size or timeout: 60, 300, 900, 3600]",
        "test",
        commands=("test",),
        type=click.IntRange(min=1),
        metavar="SECONDS",
    ),
    Flag(
        "flaky_test_attempts",
        "Attempts a failing test gets before it counts as failed; a later pass is FLAKY "
        "[default: 3 for tests marked flaky, else 1]",
        "test",
        commands=("test",),
        type=click.IntRange(min=1),
        metavar="N",
    ),
    Flag(
        "update_baselines",
        "Write each model_benchmark's timings to its baseline file (the regression gate "
        "is not read meanwhile)",
        "test",
        commands=("test",),
        kind="flag",
        default=False,
    ),
    # -- kiln clean
    Flag(
        "expunge",
        "Also delete this workspace's state (its output base).",
        "clean",
        commands=("clean",),
        kind="flag",
        default=False,
    ),
    Flag(
        "expunge_disk_cache",
        "Also delete the disk cache, which other workspaces may share.",
        "clean",
        commands=("clean",),
        kind="flag",
        default=False,
    ),
)
BY_NAME: dict[str, Flag] = {flag.name: flag for flag in FLAGS}


def flags_of(command: str) -> tuple[Flag, ...]:
    """The rows of the flags `command` takes, in the table's order."""
    return tuple(flag for flag in FLAGS if command in flag.commands)


def options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate the click command `command` with every flag it takes."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        for flag in reversed(flags_of(command)):
            function = flag.click_option()(function)
        return function

    return decorate


def by_spelling(command: str) -> dict[str, Flag]:
    """Each way a flag of `command` is written (--keep_going, --nokeep_going, -k): its row."""
    return {spelling: flag for flag in flags_of(command) for spelling in flag.spellings}


class FlagCommand(click.Command):
    """A click command whose help prints its flags in the table's groups."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {group: [] for group in (*GROUPS, "")}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and isinstance(param, click.Option):
                flag = BY_NAME.get(param.name or "") or _by_dest(param.name)
                sections[flag.group if flag else ""].append(record)
        for group, records in sections.items():
            if records:  # "" holds --help, which is no flag of the table
                with formatter.section(f"{group.capitalize()} options" if group else "Options"):
                    formatter.write_dl(records)


def _by_dest(dest: str | None) -> Flag | None:
    return next((flag for flag in FLAGS if flag.dest is not None and flag.dest == dest), None)


Record = TypeVar("Record")


class SliceRules(TypedDict, total=False):
    """How slice_options fills the fields no same-named flag fills (see there)."""

    renamed: Mapping[str, str]
    given: Mapping[str, object]
    when_unset: Mapping[str, Callable[[], object]]
    record_defaults: Iterable[str]


def slice_options(record: type[Record], options: object, **rules: Unpack[SliceRules]) -> Record:
    """The frozen dataclass `record`, each field filled from the same-named flag of
    `options` (a BuildOptions).

    `renamed` maps a field to a flag of another name (Limits.memory_mb: local_ram_mb);
    `given` holds the values no flag gives as they stand (resolved paths, the
    interpreter), and wins over a flag of the field's name; `when_unset` computes a
    field whose flag was left at None (--jobs: the host's cores); `record_defaults` names the
    fields left to the record's own default on purpose. Any other field no flag provides
    is refused: a field the table cannot fill is a mistake, not a silent default.
    """
    renamed = rules.get("renamed", {})
    given = rules.get("given", {})
    when_unset = rules.get("when_unset", {})
    record_defaults = tuple(rules.get("record_defaults", ()))
    fields = {field.name for field in dataclasses.fields(record)}  # type: ignore[arg-type]
    stray = sorted({*renamed, *given, *when_unset, *record_defaults} - fields)
    if stray:
        raise TypeError(f"{record.__name__} has no field {', '.join(stray)}")
    values: dict[str, object] = {}
    missing: list[str] = []
    for field in dataclasses.fields(record):  # type: ignore[arg-type]
        if not field.init or field.name in record_defaults:
            continue
        if field.name in given:
            values[field.name] = given[field.name]
            continue
        flag = renamed.get(field.name, field.name)
        if flag in BY_NAME and hasattr(options, flag):
            value = getattr(options, flag)
            if value is None and field.name in when_unset:
                value = when_unset[field.name]()
            values[field.name] = value
        else:
            missing.append(field.name)
    if missing:
        raise TypeError(
            f"{record.__name__}: no flag provides {', '.join(missing)}; "
            "rename the field, or pass it as renamed=, given= or record_defaults="
        )
    return record(**values)
