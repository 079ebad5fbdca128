"""The execution phase of `kiln build`: the executor, the status line, the scheduler.

Everything about where things go (disk cache, output base) and how the
result is shown is set up here, so build.py reads as the phases of a build.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kiln.action_graph import Action, ActionGraph
from kiln.cli.build_options import BuildOptions, parse_size
from kiln.cli.remote_execution import RemoteExecution
from kiln.cli.reports import FanOut, Reports
from kiln.cli.session import Session
from kiln.cli.status import StatusPrinter
from kiln.exec.executor import ExecOptions, Reporting, open_executor
from kiln.exec.scheduler import Limits, Reporter, Scheduler, ScheduleResult
from kiln.layout import DiskCache, cache_home

if TYPE_CHECKING:
    from kiln.cache.action_cache import ActionCache
    from kiln.cache.cas import ContentStore
    from kiln.exec.remote_spawn import RemoteSpawner
    from kiln.exec.remote_spawn_cache import RemoteSpawnCache


def execute_graph(
    session: Session,
    options: BuildOptions,
    graph: ActionGraph,
    limits: Limits,
    gpu_ids: tuple[str, ...],
    locate: Callable[[str], str],
    reports: Reports,
    remote_execution: RemoteExecution,
    is_test: Callable[[Action], bool] = lambda action: False,
) -> tuple[ScheduleResult, float]:
    """Run the graph, handing out the GPUs `gpu_ids`; the result and the seconds it took.
    `is_test`: actions whose failure is a test's, which the command reports itself and
    which stops nothing."""
    disk_cache = DiskCache.at(
        (options.disk_cache or cache_home()).expanduser().resolve(), options.digest_function
    )
    disk_cache.create()
    remote = remote_execution.store  # None without --remote_cache: one client per build
    exec_options = options.slice(
        ExecOptions,
        given={
            # ExecOptions.strategy is how Python actions run here, not --strategy's list
            "strategy": "worker" if options.local_strategy == "worker" else "local",
            # why each executed action ran: printed with --explain, always in the
            # invocation's record (cli/build_report.py), which `kiln report` renders
            "explain": True,
            "python": sys.executable,
            "pip_find_links": tuple(
                str((session.workspace.root / d).expanduser().resolve())
                for d in options.pip_find_links
            ),
        },
        record_defaults=("worker_preload",),  # no flag: what workers import at start
    )
    status = StatusPrinter(len(graph), locate, explain=options.explain, quiet_failures=is_test)
    reporting = Reporting(
        warn=lambda message: status.print(f"WARNING: {message}"),
        report=lambda text: status.print(f"INFO: {text}"),
    )

    def remote_spawn_cache(cas: ContentStore, action_cache: ActionCache) -> RemoteSpawnCache:
        from kiln.exec.remote_spawn_cache import RemoteSpawnCache

        assert remote is not None
        return RemoteSpawnCache(
            remote,
            cas,
            action_cache,
            accept_cached=options.remote_accept_cached,
            upload_local_results=options.remote_upload_local_results,
            warn=reporting.warn,
        )

    def remote_spawner(cas: ContentStore) -> RemoteSpawner:
        assert remote_execution.executor is not None  # it moves blobs through `remote`
        return remote_execution.executor.spawner(
            cas,
            digest_function=options.digest_function,
            warn=reporting.warn,
            report=reporting.report,
        )

    try:
        with open_executor(
            session.workspace.root,
            session.output_base,
            disk_cache,
            exec_options,
            placement=remote_execution.policy,
            remote=remote_spawn_cache if remote is not None else None,
            remote_spawner=remote_spawner if remote_execution.executor is not None else None,
            reporting=reporting,
        ) as executor:
            reporters: list[Reporter] = [status, reports.timeline]
            reporters += [r for r in (reports.events, reports.profile) if r is not None]
            if reports.events:
                reports.events.emit("build_started", actions=len(graph))
            start = time.monotonic()
            scheduler = Scheduler(
                graph,
                limits,
                executor,
                FanOut(reporters),
                keep_going=options.keep_going,
                reserved=remote_execution.policy.reserved,
                failure_stops=lambda action: not is_test(action),
                gpu_ids=gpu_ids,
            )
            result = scheduler.run()
    finally:
        status.close()
    seconds = time.monotonic() - start
    if reports.events:
        reports.events.emit(
            "build_finished",
            success=not (result.failed or result.skipped),
            seconds=round(seconds, 6),
        )
    if options.disk_cache_max_size:
        from kiln.cache.gc import collect

        collect(disk_cache.root, parse_size(options.disk_cache_max_size))
    return result, seconds
