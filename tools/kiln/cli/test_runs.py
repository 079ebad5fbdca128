"""The test actions `kiln test` runs, as its flags shape them, and how each run ended.

A test target's analysis declares one TestRunner action (kiln.rule_api.testing). Its
flags change that action before it runs: --test_timeout, --flaky_test_attempts and
--test_filter its environment (so its key: a pass under other settings is another
result); --runs_per_test=N makes N actions, run_i_of_N, never served from the cache;
--nocache_test_results makes it run whatever the cache holds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from kiln.action_graph import Action, File
from kiln.exec.outcome import ActionOutcome
from kiln.test_results import (
    ATTEMPTS_ENV,
    BASELINE_ENV,
    BENCHMARK,
    FILTER_ENV,
    LOG,
    OUTPUTS_ENV,
    RESULT,
    RUN_ENV,
    TIMEOUT_ENV,
    UPDATE_BASELINES_ENV,
    XML,
    TestRun,
    junit_xml,
    parse_failure_output,
)


@dataclass(frozen=True)
class TestOptions:
    """The flags of `kiln test`'s own rows (cli/flags.py), parsed."""

    __test__ = False  # not a pytest class

    cache_test_results: bool
    runs_per_test: int
    test_output: str  # summary | errors | all
    test_filter: str | None
    test_timeout: int | None
    flaky_test_attempts: int | None
    update_baselines: bool


@dataclass(frozen=True)
class TestAction:
    """One run of one test: its action, and where its logs go under kiln-testlogs/."""

    __test__ = False

    label: str
    action: Action
    run: int  # 1-based
    runs: int

    @property
    def logs(self) -> str:
        """kiln-testlogs/<package>/<name>[/run_i_of_N], relative to the workspace."""
        package, name = self.label.removeprefix("//").split(":", 1)
        where = f"{package}/{name}" if package else name
        suffix = f"/run_{self.run}_of_{self.runs}" if self.runs > 1 else ""
        return f"kiln-testlogs/{where}{suffix}"


def test_actions(label: str, action: Action, options: TestOptions) -> list[TestAction]:
    """The runs of one test target's action under the flags."""
    env = dict(action.env)
    if options.test_timeout is not None:
        env[TIMEOUT_ENV] = str(options.test_timeout)
    if options.flaky_test_attempts is not None:
        env[ATTEMPTS_ENV] = str(options.flaky_test_attempts)
    if options.test_filter is not None:
        env[FILTER_ENV] = options.test_filter
    if options.update_baselines and BASELINE_ENV in env:
        env[UPDATE_BASELINES_ENV] = "1"
    runs = options.runs_per_test
    uncached = not options.cache_test_results or runs > 1
    if runs == 1:
        changed = dataclasses.replace(action, env=tuple(env.items()), uncached=uncached)
        return [TestAction(label, changed, 1, 1)]
    made = []
    results = action.primary_output
    for run in range(1, runs + 1):
        output = File(f"{results.path}.run_{run}_of_{runs}", results.owner, directory=True)
        run_env = {
            **env,
            OUTPUTS_ENV: output.path,
            RUN_ENV: str(run),
            "TEST_TOTAL_RUNS": str(runs),
        }
        changed = dataclasses.replace(
            action, outputs=(output,), env=tuple(run_env.items()), uncached=True
        )
        made.append(TestAction(label, changed, run, runs))
    return made


@dataclass(frozen=True)
class RunResult:
    """How one run ended: NO STATUS (it never ran: a dependency failed) when `run` is None."""

    test: TestAction
    run: TestRun | None
    cached: bool = False
    log: str = ""
    message: str = ""  # why a run that never reported failed (the runner could not start)


def result_of(test: TestAction, outcome: ActionOutcome | None, workspace: Path) -> RunResult:
    if outcome is None:
        return RunResult(test, None)
    results = workspace / test.action.primary_output.path
    if outcome.failure is None:
        try:
            run = TestRun.from_json((results / RESULT).read_text(encoding="utf-8"))
            log = (results / LOG).read_text(encoding="utf-8", errors="replace")
        except OSError:
            run, log = None, ""
        if run is None:  # a result without its record: not a pass
            return RunResult(test, TestRun("FAILED", outcome.seconds), message="no test result")
        return RunResult(test, run, cached=outcome.status == "cached", log=log)
    parsed, log = parse_failure_output(outcome.failure.output)
    if parsed is None:  # the runner did not report: it could not run at all
        message = outcome.failure.message
        return RunResult(test, TestRun("FAILED", outcome.seconds), log=log, message=message)
    return RunResult(test, parsed, log=log)


def write_logs(result: RunResult, workspace: Path) -> Path | None:
    """kiln-testlogs/<package>/<name>/test.log and test.xml of a run that reported; the log."""
    if result.run is None:
        return None
    folder = workspace / result.test.logs
    folder.mkdir(parents=True, exist_ok=True)
    log_text = result.log + (f"{result.message}\n" if result.message else "")
    xml_path = workspace / result.test.action.primary_output.path / XML
    if result.run.passed and xml_path.is_file():
        xml = xml_path.read_text(encoding="utf-8", errors="replace")
    else:
        xml = junit_xml(result.test.label, result.run, log_text, message=result.message)
    _replace(folder / LOG, log_text)
    _replace(folder / XML, xml)
    return folder / LOG


def _replace(path: Path, text: str) -> None:
    """Write a whole file (a temp file renamed over it): a reader never sees half."""
    temp = path.with_name(f".{path.name}.tmp")
    try:
        temp.write_text(text, encoding="utf-8")
        temp.replace(path)
    finally:
        temp.unlink(missing_ok=True)


def update_baseline(result: RunResult, workspace: Path) -> Path | None:
    """--update_baselines: a passed benchmark's timings into its baseline file; its path."""
    baseline = dict(result.test.action.env).get(BASELINE_ENV)
    if baseline is None or result.run is None or not result.run.passed:
        return None
    timings = workspace / result.test.action.primary_output.path / BENCHMARK
    if not timings.is_file():
        return None
    target = workspace / baseline
    _replace(target, timings.read_text(encoding="utf-8"))
    return target
