"""kiln build TARGETS...: load, analyze, execute, deliver to kiln-out/."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import click

from kiln.action_graph import Action, ActionGraph
from kiln.analysis.analysis_cache import AnalysisCache, CachedAnalysis
from kiln.analysis.targets import analyze_targets
from kiln.cli import EXIT_INTERRUPTED, flags
from kiln.cli.build_options import BuildOptions, parse_action_env
from kiln.cli.build_report import finish_report
from kiln.cli.remote_execution import RemoteExecution, remote_execution, toolchain_resolver
from kiln.cli.reports import Reports, open_reports
from kiln.cli.session import Session
from kiln.cli.summary import print_summary, withdrawn_line
from kiln.errors import BuildFailure, KilnError
from kiln.exec import host
from kiln.exec.scheduler import Limits, ScheduleResult
from kiln.exec.withdraw import PlacedOutputs, unbuilt_owners, withdraw
from kiln.exec.workspace_lock import workspace_lock
from kiln.host_facts import HostFacts
from kiln.layout import output_root
from kiln.loading.graph import GraphBuilder, TargetGraph
from kiln.loading.loader import PackageLoader
from kiln.loading.patterns import expand, parse_patterns


@click.command("build", cls=flags.FlagCommand)
@click.argument("targets", nargs=-1, required=True)
@flags.options("build")
@click.pass_obj
def command(session: Session, /, targets: tuple[str, ...], **raw: Any) -> int:
    """Build TARGETS (labels or patterns such as //models/...)."""
    options = BuildOptions(**raw)
    with workspace_lock(
        session.output_base,
        wait=options.lock_wait,
        on_wait=lambda message: click.echo(f"INFO: {message}", err=True),
    ):
        return run_build(session, list(targets), options)


def run_build(session: Session, targets: list[str], options: BuildOptions) -> int:
    reports = open_reports(options.build_event_json_file, options.profile, options.report)
    try:
        reports.exit_code = _build(session, targets, options, reports)
        return reports.exit_code
    except KilnError as error:
        reports.error = error.format()
        raise
    except KeyboardInterrupt:
        reports.exit_code, reports.error = EXIT_INTERRUPTED, "interrupted"
        raise
    finally:
        reports.close()
        finish_report(session, reports, "build", targets)


class Plan(Protocol):
    """What a command runs of the analyzed targets: `kiln build` all but the tests' own
    actions; `kiln test` (cli/test.py) those of the tests it selects, too."""

    def select(self, loader: PackageLoader, labels: list[str]) -> list[str]:
        """The targets to load and analyze, given those the patterns matched."""
        ...

    def actions(self, analysis: CachedAnalysis) -> list[Action]:
        """The actions to run."""
        ...


class BuildPlan:
    def select(self, loader: PackageLoader, labels: list[str]) -> list[str]:
        return labels

    def actions(self, analysis: CachedAnalysis) -> list[Action]:
        return analysis.without_tests()


@dataclasses.dataclass(frozen=True)
class Executed:
    """What execute_targets did: the analysis, how the actions ended, what failed early."""

    analysis: CachedAnalysis
    result: ScheduleResult
    seconds: float
    errors: list[KilnError]
    withdrawn: list[str]
    planned: list[Action] = dataclasses.field(default_factory=list)  # every action run


def _build(session: Session, targets: list[str], options: BuildOptions, reports: Reports) -> int:
    done = execute_targets(session, targets, options, reports, BuildPlan())
    print_summary(
        lambda text: click.echo(text, err=True),
        done.analysis.requested,
        done.result,
        done.seconds,
        workspace_root=session.workspace.root,
        cwd=session.cwd,
        failed_early=bool(done.errors),
        withdrawn=done.withdrawn,
    )
    raise_if_failed(done)
    return 0


def raise_if_failed(done: Executed) -> None:
    result, errors = done.result, done.errors
    if result.failed or result.skipped or errors:
        raise BuildFailure(
            f"build did not complete successfully ({len(result.failed)} failed, "
            f"{len(result.skipped)} not run"
            + (f", {len(errors)} targets failed before execution" if errors else "")
            + ")"
        )


def execute_targets(
    session: Session,
    targets: list[str],
    options: BuildOptions,
    reports: Reports,
    plan: Plan,
    *,
    is_test: Callable[[Action], bool] = lambda action: False,
) -> Executed:
    """Load, analyze and execute `targets` (patterns) as `plan` says; withdraw what did
    not build from kiln-out/. `is_test`: actions whose failure is a test's (`kiln
    test`): the command reports it, and it stops no other action."""
    from kiln.cli.execution import execute_graph  # the executor and the caches

    _check_output_root(session)
    usable_gpus = host.usable_gpus()  # one nvidia-smi call: the count and the ids
    limits = options.slice(
        Limits,
        renamed={"memory_mb": "local_ram_mb"},
        when_unset={  # the flags' default, None, is "what this host has"
            "jobs": host.cpu_count,
            "gpus": lambda: len(usable_gpus),
            "memory_mb": lambda: host.memory_mb() * 2 // 3,
        },
    )
    host_facts = HostFacts.of_this_machine()
    remote = remote_execution(options, host_facts, limits.gpus)  # flags checked before loading
    reports.phase("loading")
    errors: list[KilnError] = []
    on_error = _Reporter(errors) if options.keep_going else None
    loader = PackageLoader(session.workspace, session.graph_cache_file)
    try:
        patterns = parse_patterns(targets, session.working_package)
        expanded = plan.select(
            loader, expand(loader, patterns, skip_manual=True, on_error=on_error)
        )
        graph = GraphBuilder(loader).build(expanded, on_error=on_error)
        labels = graph.roots  # --keep_going: without those whose packages failed to load
    finally:
        loader.save()
    reports.phase("analysis")

    placed = PlacedOutputs(session.output_base.placed_outputs)
    try:
        analysis = analyze_targets(
            loader,
            graph,
            labels,
            AnalysisCache(session.output_base.analysis_cache),
            toolchain_resolver(remote, host_facts),
            keep_going=options.keep_going,
            report=lambda error: _report(error, errors),
        )
    except KilnError as error:  # the build stops here: what it made before goes now
        gone = placed.withdraw(_failed_early(graph, [error], set()), session.workspace.root)
        placed.save()
        if gone:
            click.echo(f"INFO: {withdrawn_line(gone)}", err=True)
        raise

    planned = plan.actions(analysis)
    actions = _with_env(planned, parse_action_env(options.action_env))
    actions = _check_gpus(actions, limits, remote, errors, keep_going=options.keep_going)

    reports.phase("execution")

    def locate(label: str) -> str:
        package, name = label.split(":", 1)
        target = loader.packages[package.removeprefix("//")].targets[name]
        return str(loader.location_of(target))

    action_graph = ActionGraph.of(actions)
    gpu_ids = host.gpu_pool_ids(usable_gpus, limits.gpus)
    result, seconds = execute_graph(
        session, options, action_graph, limits, gpu_ids, locate, reports, remote, is_test
    )
    unbuilt = unbuilt_owners(action_graph, [o.action for o in result.failed])
    unbuilt |= {e.label for e in errors if e.label}  # refused before running (a GPU)
    withdrawn = withdraw(planned, unbuilt, session.workspace.root)
    early = _failed_early(graph, errors, set(expanded) - set(labels))
    withdrawn = sorted({*withdrawn, *placed.withdraw(early | unbuilt, session.workspace.root)})
    placed.record(planned, unbuilt | early)
    placed.save()
    done = Executed(analysis, result, seconds, errors, withdrawn, planned)
    reports.executed = done  # for the build report
    return done


def _failed_early(graph: TargetGraph, errors: list[KilnError], dropped: set[str]) -> set[str]:
    """The targets a loading or analysis error stopped: the failing target, every
    target of the graph depending on it, and the roots left out at loading."""
    rdeps = graph.rdeps()
    pending = [e.label for e in errors if e.label and e.label in graph.targets]
    failed = set(dropped)
    while pending:
        label = pending.pop()
        if label not in failed:
            failed.add(label)
            pending.extend(rdeps.get(label, ()))
    return failed | {e.label for e in errors if e.label}


def _check_output_root(session: Session) -> None:
    """kiln-out/ is a directory or absent: one error now, not one per action."""
    root = output_root(session.workspace.root)
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise KilnError(
            f"{root} is not a directory: kiln puts the build's outputs there",
            hint=f"remove it (rm {root}) and build again",
        )


def _with_env(actions: list[Action], extra: dict[str, str]) -> list[Action]:
    """--action_env: the variables join every command's environment, and its key."""
    if not extra:
        return actions
    return [
        a if a.content is not None else dataclasses.replace(a, env=(*a.env, *extra.items()))
        for a in actions
    ]


def _report(error: KilnError, errors: list[KilnError]) -> None:
    """--keep_going: print the error now, remember it for the exit code, go on."""
    click.echo(f"ERROR: {error.format()}", err=True)
    errors.append(error)


@dataclasses.dataclass
class _Reporter:
    """--keep_going at loading: each error once, though a broken package is met by the
    wildcard that expands it and again by every target depending on it."""

    errors: list[KilnError]
    seen: set[str] = dataclasses.field(default_factory=set)

    def __call__(self, error: KilnError) -> None:
        if error.format() not in self.seen:
            self.seen.add(error.format())
            _report(error, self.errors)


def _check_gpus(
    actions: list[Action],
    limits: Limits,
    remote: RemoteExecution,
    errors: list[KilnError],
    *,
    keep_going: bool,
) -> list[Action]:
    """The actions that can run (here, or on the remote executor); those needing more GPUs
    than this machine has, and not sent elsewhere, fail here."""
    runnable: list[Action] = []
    blocked: set[str] = set()  # outputs that will not exist
    for action in actions:  # dependencies come first
        if action.resources.gpu > limits.gpus and remote.policy.placement(action) != "remote":
            error = KilnError(
                f"{action.describe()} needs {action.resources.gpu} GPU(s), "
                f"but {limits.gpus} are available",
                label=action.owner,
                hint="build on a machine with a CUDA GPU, or pass --gpus=N if detection is wrong",
            )
            if not keep_going:
                raise error
            _report(error, errors)
            blocked.update(f.path for f in action.outputs)
        elif any(f.path in blocked for f in action.inputs):
            blocked.update(f.path for f in action.outputs)
        else:
            runnable.append(action)
    return runnable
