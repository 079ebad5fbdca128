"""kiln test PATTERNS...: build the targets, run the tests among them, as `bazel test` does.

    select   the test targets matched, test_suites expanded (test_targets.py)
    build    everything matched, each test's TestRunner action too (shaped by the flags:
             test_runs.py), in parallel and sandboxed like any action; a pass is an action
             result, so it is served from the cache while nothing the test read changed
    report   kiln-testlogs/<package>/<name>/test.log and test.xml, `test_result` build
             events, Bazel's summary (test_summary.py)

Exit codes, as Bazel's: 0 every test passed, 1 the build failed (a test that could not be
built has NO STATUS), 3 a test failed or timed out, 4 no test target matched.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kiln.action_graph import Action
from kiln.analysis.analysis_cache import CachedAnalysis
from kiln.cli import EXIT_INTERRUPTED, flags
from kiln.cli.build import Executed, execute_targets, raise_if_failed
from kiln.cli.build_options import BuildOptions
from kiln.cli.build_report import finish_report
from kiln.cli.reports import Reports, open_reports
from kiln.cli.session import Session
from kiln.cli.summary import actions_line
from kiln.cli.test_runs import (
    RunResult,
    TestAction,
    TestOptions,
    result_of,
    test_actions,
    update_baseline,
    write_logs,
)
from kiln.cli.test_summary import TargetResult, print_test_summary
from kiln.cli.test_targets import select_tests
from kiln.errors import KilnError
from kiln.exec.workspace_lock import workspace_lock
from kiln.loading.loader import PackageLoader

EXIT_TESTS_FAILED = 3
EXIT_NO_TESTS = 4
MNEMONIC = "TestRunner"  # kiln.rule_api.testing.MNEMONIC (imported late: pydantic)
_RULE = "=" * 80


@click.command("test", cls=flags.FlagCommand)
@click.argument("targets", nargs=-1, required=True)
@flags.options("test")
@click.pass_obj
def command(session: Session, /, targets: tuple[str, ...], **raw: Any) -> int:
    """Build TARGETS and run the tests among them (kiln test //...)."""
    build = BuildOptions(**{flag.name: raw[flag.name] for flag in flags.flags_of("build")})
    own = set(flags.flags_of("test")) - set(flags.flags_of("build"))
    options = TestOptions(**{flag.name: raw[flag.name] for flag in own})
    with workspace_lock(
        session.output_base,
        wait=build.lock_wait,
        on_wait=lambda message: click.echo(f"INFO: {message}", err=True),
    ):
        reports = open_reports(build.build_event_json_file, build.profile, build.report)
        try:
            reports.exit_code = run_tests(session, list(targets), build, options, reports)
            return reports.exit_code
        except KilnError as error:
            reports.error = error.format()
            raise
        except KeyboardInterrupt:
            reports.exit_code, reports.error = EXIT_INTERRUPTED, "interrupted"
            raise
        finally:
            reports.close()
            finish_report(session, reports, "test", list(targets))


class TestPlan:
    """The targets matched plus the tests they select; the tests' actions as flagged."""

    __test__ = False

    def __init__(self, options: TestOptions) -> None:
        self.options = options
        self.tests: list[str] = []
        self.runs: list[TestAction] = []

    def select(self, loader: PackageLoader, labels: list[str]) -> list[str]:
        self.tests = select_tests(loader, labels)
        return list(dict.fromkeys([*labels, *self.tests]))

    def actions(self, analysis: CachedAnalysis) -> list[Action]:
        producer = analysis.producer
        self.runs = []
        for label in self.tests:
            results = analysis.tests.get(label)
            if results is not None:  # else its analysis failed (--keep_going): NO STATUS
                self.runs += test_actions(label, producer[results.path], self.options)
        return [*analysis.without_tests(), *(run.action for run in self.runs)]


def run_tests(
    session: Session,
    targets: list[str],
    build: BuildOptions,
    options: TestOptions,
    reports: Reports,
) -> int:
    plan = TestPlan(options)
    done = execute_targets(
        session,
        targets,
        build,
        reports,
        plan,
        is_test=lambda action: action.mnemonic == MNEMONIC,
    )
    root = session.workspace.root
    results = _results(plan, done, root)
    reports.tests = results
    logs = _write_logs(results, root)
    echo(actions_line(done.result.outcomes))
    _print_outputs(echo, results, logs, options.test_output)
    if options.update_baselines:
        for target in results:
            for run in target.runs:
                written = update_baseline(run, root)
                if written is not None:
                    echo(f"INFO: {target.label}: wrote its timings to {written}")
    if reports.events is not None:
        for target in results:
            for run in target.runs:
                reports.events.emit(
                    "test_result",
                    label=target.label,
                    status=run.run.status if run.run else "NO STATUS",
                    cached=run.cached,
                    seconds=run.run.seconds if run.run else None,
                    attempts=run.run.attempts if run.run else 0,
                    run=run.test.run,
                    runs=run.test.runs,
                    log=str(logs[id(run)].relative_to(root)) if id(run) in logs else None,
                )
            reports.events.emit("test_summary", label=target.label, status=target.status)
    failed = [t for t in results if not t.passed and t.status != "NO STATUS"]
    build_failed = _build_failed(done)
    if build_failed:
        echo("ERROR: Build did NOT complete successfully")
    elif failed:
        count = f"{len(failed)} test{'s' if len(failed) != 1 else ''}"
        echo(f"INFO: Build completed, {count} FAILED, in {done.seconds:.2f}s")
    else:
        echo(f"INFO: Build completed successfully in {done.seconds:.2f}s")
    if results:
        print_test_summary(echo, results, logs)
    if build_failed:
        raise_if_failed(done)
    if not plan.tests:
        echo("ERROR: No test targets were found, yet testing was requested")
        return EXIT_NO_TESTS
    return EXIT_TESTS_FAILED if failed else 0


def echo(text: str) -> None:
    click.echo(text, err=True)


def _build_failed(done: Executed) -> bool:
    """Something other than a test failed: the build, not the tests."""
    failed = [o for o in done.result.failed if o.action.mnemonic != MNEMONIC]
    skipped = [a for a in done.result.skipped if a.mnemonic != MNEMONIC]
    return bool(failed or skipped or done.errors or done.result.interrupted)


def _results(plan: TestPlan, done: Executed, root: Path) -> list[TargetResult]:
    outcomes = {o.action.primary_output.path: o for o in done.result.outcomes}
    by_label: dict[str, list[RunResult]] = {label: [] for label in plan.tests}
    for run in plan.runs:
        outcome = outcomes.get(run.action.primary_output.path)
        by_label[run.label].append(result_of(run, outcome, root))
    return [TargetResult(label, tuple(runs)) for label, runs in by_label.items()]


def _write_logs(results: list[TargetResult], root: Path) -> dict[int, Path]:
    """Each target's kiln-testlogs/ folder made anew; the test.log of each run, by id()."""
    logs: dict[int, Path] = {}
    for target in results:
        if not target.runs:
            continue
        folder = root / TestAction(target.label, target.runs[0].test.action, 1, 1).logs
        shutil.rmtree(folder, ignore_errors=True)
        for run in target.runs:
            path = write_logs(run, root)
            if path is not None:
                logs[id(run)] = path
    return logs


def _print_outputs(
    echo: Callable[[str], None],
    results: list[TargetResult],
    logs: dict[int, Path],
    test_output: str,
) -> None:
    """Bazel's lines for runs that ran: `FAIL: //t (see .../test.log)` for a failure, and
    with --test_output=errors its log; with =all every run's log."""
    for target in results:
        for run in target.runs:
            if run.run is None or run.cached:
                continue
            failed = not run.run.passed
            if not failed and test_output != "all":
                continue
            word = {"FAILED": "FAIL", "TIMEOUT": "TIMEOUT"}.get(run.run.status, run.run.status)
            where = f" (see {logs[id(run)]})" if id(run) in logs else ""
            echo(f"{word}: {target.label}{where}")
            if test_output == "all" or (failed and test_output == "errors"):
                text = run.log + (f"{run.message}\n" if run.message else "")
                echo(f"INFO: From Testing {target.label}:")
                echo(f"==================== Test output for {target.label}:")
                echo(text.rstrip("\n"))
                echo(_RULE)
