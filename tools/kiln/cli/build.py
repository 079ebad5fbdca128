"""kiln build TARGETS...: load, analyze, execute, deliver to kiln-out/."""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from kiln.action_graph import Action, File
from kiln.analysis.analysis_cache import AnalysisCache
from kiln.analysis.targets import analyze_targets
from kiln.cli.build_options import (
    BuildOptions,
    build_options,
    parse_action_env,
    parse_size,
    remote_cache_client,
)
from kiln.cli.session import Session
from kiln.errors import BuildFailure, KilnError
from kiln.exec import host
from kiln.exec.scheduler import Limits, Reporter, Scheduler, ScheduleResult
from kiln.exec.workspace_lock import workspace_lock
from kiln.host_facts import HostFacts
from kiln.layout import DiskCache, cache_home
from kiln.loading.graph import GraphBuilder
from kiln.loading.loader import PackageLoader
from kiln.loading.patterns import expand, parse_patterns

# Like Bazel, name the outputs of a few targets, not of every target of //...
SHOWN_TARGETS = 20


@click.command("build")
@click.argument("targets", nargs=-1, required=True)
@build_options
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


@dataclass
class _Phase:
    name: str
    start: float
    end: float = 0.0


def run_build(session: Session, targets: list[str], options: BuildOptions) -> int:
    phases: list[_Phase] = [_Phase("loading", time.monotonic())]
    loader = PackageLoader(session.workspace, session.graph_cache_file)
    try:
        patterns = parse_patterns(targets, session.working_package)
        labels = expand(loader, patterns, skip_manual=True)
        graph = GraphBuilder(loader).build(labels)
    finally:
        loader.save()
    phases[-1].end = time.monotonic()
    phases.append(_Phase("analysis", time.monotonic()))

    errors: list[KilnError] = []
    analysis = analyze_targets(
        loader,
        graph,
        labels,
        AnalysisCache(session.output_base.analysis_cache),
        HostFacts.of_this_machine(),
        keep_going=options.keep_going,
        report=lambda error: _report(error, errors),
    )
    phases[-1].end = time.monotonic()

    limits = Limits(
        jobs=options.jobs or host.cpu_count(),
        gpus=host.gpu_count() if options.gpus is None else options.gpus,
        memory_mb=host.memory_mb() * 2 // 3
        if options.local_ram_mb is None
        else options.local_ram_mb,
    )
    actions = _with_env(analysis.actions, parse_action_env(options.action_env))
    actions = _check_gpus(actions, limits, errors, keep_going=options.keep_going)

    phases.append(_Phase("execution", time.monotonic()))
    producer = {f.path: a for a in actions for f in a.outputs}
    result, seconds = _execute(session, options, actions, producer, limits, loader, phases)
    _summarize(session, analysis.requested, result, seconds, failed_early=bool(errors))
    if result.failed or result.skipped or errors:
        raise BuildFailure(
            f"build did not complete successfully ({len(result.failed)} failed, "
            f"{len(set(map(id, result.skipped)))} not run"
            + (f", {len(errors)} targets failed before execution" if errors else "")
            + ")"
        )
    return 0


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


def _check_gpus(
    actions: list[Action], limits: Limits, errors: list[KilnError], *, keep_going: bool
) -> list[Action]:
    """The actions this machine can run; those needing more GPUs than it has fail here."""
    runnable: list[Action] = []
    blocked: set[str] = set()  # outputs that will not exist
    for action in actions:  # dependencies come first
        if action.resources.gpu > limits.gpus:
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


def _execute(
    session: Session,
    options: BuildOptions,
    actions: list[Action],
    producer: dict[str, Action],
    limits: Limits,
    loader: PackageLoader,
    phases: list[_Phase],
) -> tuple[ScheduleResult, float]:
    from kiln.cache.action_cache import ActionCache
    from kiln.cache.cas import ContentStore
    from kiln.cache.digest_cache import FileDigestCache
    from kiln.cli.status import StatusPrinter
    from kiln.exec.action_state import ActionState
    from kiln.exec.build_events import BuildEventWriter
    from kiln.exec.executor import ExecOptions, Executor
    from kiln.exec.explain import ExplainLog
    from kiln.exec.profile import ProfileWriter

    disk_cache = DiskCache.at(
        (options.disk_cache or cache_home()).expanduser().resolve(), options.digest_function
    )
    disk_cache.create()
    remote = remote_cache_client(options)  # None without --remote_cache
    executor = Executor(
        workspace_root=session.workspace.root,
        output_base=session.output_base,
        cas=ContentStore(disk_cache.root, options.digest_function),
        action_cache=ActionCache(disk_cache.root),
        digest_cache=FileDigestCache(
            session.output_base.digest_log(options.digest_function), options.digest_function
        ),
        explain_log=ExplainLog(session.output_base.explain_log),
        state=ActionState(session.output_base.action_state, session.workspace.root),
        options=ExecOptions(
            digest_function=options.digest_function,
            strategy="worker" if options.strategy == "worker" else "local",
            worker_max_instances=options.worker_max_instances,
            action_timeout=options.action_timeout,
            explain=options.explain,
            python=sys.executable,
        ),
    )
    executor.execroots.sweep()

    def locate(label: str) -> str:
        target = loader.packages[label[2 : label.index(":")]].targets[label.split(":", 1)[1]]
        return str(loader.location_of(target))

    status = StatusPrinter(len(actions), locate, explain=options.explain)
    if remote is not None:
        from kiln.exec.remote_spawn_cache import RemoteSpawnCache

        executor.remote = RemoteSpawnCache(
            remote,
            executor.cas,
            executor.action_cache,
            accept_cached=options.remote_accept_cached,
            upload_local_results=options.remote_upload_local_results,
            warn=lambda message: status.print(f"WARNING: {message}"),
        )
    reporters: list[Any] = [status]
    events = (
        BuildEventWriter(options.build_event_json_file) if options.build_event_json_file else None
    )
    profile = ProfileWriter(options.profile) if options.profile else None
    reporters += [r for r in (events, profile) if r is not None]
    if events:
        events.emit("build_started", actions=len(actions))
    start = time.monotonic()
    try:
        result = Scheduler(
            actions,
            producer,
            limits,
            executor.execute,
            _FanOut(reporters),
            keep_going=options.keep_going,
            interrupt=executor.interrupt,
            up_to_date=executor.up_to_date,
        ).run()
    finally:
        status.close()
        executor.shutdown()
        executor.digest_cache.close()
        executor.explain_log.save()
        executor.state.save()
        phases[-1].end = time.monotonic()
        if profile:
            for phase in phases:
                profile.phase(phase.name, phase.start, phase.end or time.monotonic())
            profile.write()
    seconds = time.monotonic() - start
    if events:
        events.emit(
            "build_finished",
            success=not (result.failed or result.skipped),
            seconds=round(seconds, 6),
        )
        events.close()
    if options.disk_cache_max_size:
        from kiln.cache.gc import collect

        collect(disk_cache.root, parse_size(options.disk_cache_max_size))
    return result, seconds


class _FanOut(Reporter):
    def __init__(self, reporters: list[Reporter]):
        self.reporters = reporters

    def action_started(self, action: Action, lane: str) -> None:
        for reporter in self.reporters:
            reporter.action_started(action, lane)

    def action_finished(self, outcome: Any) -> None:
        for reporter in self.reporters:
            reporter.action_finished(outcome)


def _summarize(
    session: Session,
    requested: dict[str, tuple[File, ...]],
    result: ScheduleResult,
    seconds: float,
    *,
    failed_early: bool = False,
) -> None:
    outcomes = result.outcomes
    hits = sum(1 for o in outcomes if o.status == "cached")
    executed = [o for o in outcomes if o.status == "executed"]
    by_strategy: dict[str, int] = {}
    for outcome in executed:
        by_strategy[outcome.strategy] = by_strategy.get(outcome.strategy, 0) + 1
    detail = ", ".join(f"{n} {s}" for s, n in sorted(by_strategy.items()))

    def echo(text: str) -> None:
        click.echo(text, err=True)

    remote_hits = sum(1 for o in outcomes if o.remote == "hit")
    remote_misses = sum(1 for o in outcomes if o.remote == "miss")
    echo(
        f"INFO: {len(outcomes)} actions: {hits} cache hits"
        + (f" ({hits - remote_hits} disk, {remote_hits} remote)" if remote_hits else "")
        + f", {len(executed)} executed"
        + (f" ({detail})" if detail else "")
        + (f", {remote_misses} remote cache misses" if remote_hits or remote_misses else "")
        + (f", {len(result.failed)} failed" if result.failed else "")
    )
    if result.failed or result.skipped or failed_early:
        return
    root = session.workspace.root
    labels = list(requested)
    for label in labels[:SHOWN_TARGETS]:
        echo(f"Target {label} up-to-date:")
        for file in requested[label]:
            path = Path(root / file.path)
            try:
                shown = path.relative_to(session.cwd)
            except ValueError:
                shown = path
            echo(f"  {shown}")
    if len(labels) > SHOWN_TARGETS:
        echo(f"  ... and {len(labels) - SHOWN_TARGETS} more targets, all up-to-date")
    echo(f"INFO: Build completed successfully in {seconds:.2f}s")
