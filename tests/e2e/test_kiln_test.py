"""kiln test: sh_test and test_suite targets run as cached, sandboxed actions, with Bazel's
flags, summary, exit codes, kiln-testlogs/ and JUnit XML."""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree

import pytest

from tests.kiln_workspace import Workspace

TESTS = """
sh_test(name = "pass_test", srcs = ["pass.sh"], data = ["data.txt"])
sh_test(name = "fail_test", srcs = ["fail.sh"])
sh_test(name = "slow_test", srcs = ["slow.sh"], tags = ["manual"])
sh_test(name = "flaky_test", srcs = ["flaky.sh"], tags = ["manual"])
sh_test(name = "env_test", srcs = ["env.sh"], tags = ["manual"])
test_suite(name = "all")
test_suite(name = "some", tests = [":pass_test", ":env_test"], tags = ["manual"])
genrule(name = "gen", outs = ["g.txt"], cmd = "echo made > $@")
"""


@pytest.fixture
def tests_ws(ws: Workspace) -> Workspace:
    ws.write("t/BUILD", TESTS)
    ws.write("t/pass.sh", 'grep -q hello t/data.txt || exit 1\necho "passing: $TEST_TARGET"\n')
    ws.write("t/data.txt", "hello\n")
    ws.write("t/fail.sh", 'echo "about to fail"\nexit 2\n')
    ws.write("t/slow.sh", "echo started\nsleep 60\n")
    # Fails on its first attempt: $TMPDIR is the action's, shared by its attempts.
    ws.write(
        "t/flaky.sh",
        'if [ ! -e "$TMPDIR/tried" ]; then touch "$TMPDIR/tried"; echo first; exit 1; fi\n'
        "echo second\n",
    )
    ws.write("t/env.sh", 'echo "filter=$TESTBRIDGE_TEST_ONLY run=${TEST_RUN_NUMBER:-}"\n')
    return ws


def line_of(err: str, label: str) -> str:
    return next(line for line in err.splitlines() if line.startswith(label + " "))


def test_passes_and_failures_get_bazels_summary_exit_code_and_logs(tests_ws: Workspace) -> None:
    ws = tests_ws
    run = ws.kiln("test", "//t/...")
    assert run.code == 3, run.err
    passed, failed = line_of(run.err, "//t:pass_test"), line_of(run.err, "//t:fail_test")
    # Bazel's columns: the status ends at column 79, then the time.
    assert passed.startswith("//t:pass_test" + " " * 59 + " PASSED in ")
    assert failed.startswith("//t:fail_test" + " " * 59 + " FAILED in ")
    log = ws.root / "kiln-testlogs/t/fail_test/test.log"
    assert f"FAIL: //t:fail_test (see {log})" in run.err
    assert f"  {log}" in run.err
    assert "Executed 2 out of 2 tests: 1 test passes and 1 fails locally." in run.err
    assert "about to fail" not in run.err  # --test_output=summary: the log is in the file
    assert log.read_text() == "about to fail\n-- Test exited with code 2\n"
    passing = (ws.root / "kiln-testlogs/t/pass_test/test.log").read_text()
    assert passing == "passing: //t:pass_test\n"
    suite = ElementTree.parse(ws.root / "kiln-testlogs/t/fail_test/test.xml").getroot()[0]
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == (
        "t/fail_test",
        "1",
        "1",
    )
    assert suite.find("testcase/failure") is not None
    ok = ElementTree.parse(ws.root / "kiln-testlogs/t/pass_test/test.xml").getroot()[0]
    assert ok.get("failures") == "0" and ok.findtext("system-out") == passing


def test_a_pass_is_cached_a_failure_never_is(tests_ws: Workspace) -> None:
    ws = tests_ws
    assert ws.kiln("test", "//t/...").code == 3
    again = ws.kiln("test", "//t/...", "--test_output=errors")
    assert again.code == 3
    assert "(cached) PASSED" in line_of(again.err, "//t:pass_test")
    assert "FAILED" in line_of(again.err, "//t:fail_test")
    assert again.executed == 0 and again.hits == 2  # the genrule, the pass; the failure ran
    assert "==================== Test output for //t:fail_test:\nabout to fail" in again.err
    assert "Executed 1 out of 2 tests" in again.err


def test_an_input_change_or_nocache_test_results_runs_the_test_again(tests_ws: Workspace) -> None:
    ws = tests_ws
    assert ws.kiln("test", "//t:pass_test").code == 0
    assert ws.kiln("test", "//t:pass_test").executed == 0
    forced = ws.kiln("test", "//t:pass_test", "--nocache_test_results")
    assert forced.code == 0 and forced.executed == 1
    assert "(cached)" not in forced.err
    ws.write("t/data.txt", "hello again\n")  # data the test reads
    assert ws.kiln("test", "//t:pass_test").executed == 1
    ws.write("t/data.txt", "bye\n")
    broken = ws.kiln("test", "//t:pass_test")
    assert broken.code == 3 and "FAILED" in line_of(broken.err, "//t:pass_test")


def test_a_hanging_test_times_out_and_is_never_cached(tests_ws: Workspace) -> None:
    ws = tests_ws
    for _ in range(2):
        run = ws.kiln("test", "//t:slow_test", "--test_timeout=1")
        assert run.code == 3, run.err
        assert line_of(run.err, "//t:slow_test").split()[-3:] == ["TIMEOUT", "in", "1.0s"]
        assert run.executed == 0 and run.hits == 0  # it ran (and failed) both times
    log = (ws.root / "kiln-testlogs/t/slow_test/test.log").read_text()
    assert log == "started\n-- Test timed out after 1 s (TEST_TIMEOUT)\n"


def test_flaky_test_attempts_retries_and_reports_flaky(tests_ws: Workspace) -> None:
    ws = tests_ws
    assert ws.kiln("test", "//t:flaky_test").code == 3
    run = ws.kiln("test", "//t:flaky_test", "--flaky_test_attempts=2")
    assert run.code == 0, run.err
    # the seconds are the attempts' own: 0.0 alone, 0.1 and more on a loaded machine
    flaky = line_of(run.err, "//t:flaky_test")
    assert re.search(r"FLAKY, failed in 1 out of 2 in \d+\.\ds$", flaky), flaky
    assert (ws.root / "kiln-testlogs/t/flaky_test/test.log").read_text() == "second\n"
    attempt = ws.root / "kiln-out/t/flaky_test.test/test_attempts/attempt_1.log"
    assert attempt.read_text() == "first\n-- Test exited with code 1\n"


def test_suites_expand_and_manual_tests_stay_out(tests_ws: Workspace) -> None:
    ws = tests_ws
    everything = ws.kiln("test", "//t:all")  # empty: the package's tests but manual ones
    assert everything.code == 3
    assert [line.split()[0] for line in everything.err.splitlines() if line.startswith("//")] == [
        "//t:fail_test",
        "//t:pass_test",
    ]
    some = ws.kiln("test", "//t:some")  # a manual test named by a suite runs
    assert some.code == 0, some.err
    assert "PASSED" in line_of(some.err, "//t:env_test")


def test_no_test_target_exits_4_after_building(tests_ws: Workspace) -> None:
    run = tests_ws.kiln("test", "//t:gen")
    assert run.code == 4
    assert "ERROR: No test targets were found, yet testing was requested" in run.err
    assert tests_ws.out("t/g.txt") == "made\n"


def test_kiln_build_builds_what_tests_need_but_runs_none(tests_ws: Workspace) -> None:
    run = tests_ws.kiln("build", "//t/...")
    assert run.code == 0, run.err
    assert "TestRunner" not in run.err
    assert not (tests_ws.root / "kiln-testlogs").exists()


def test_filter_and_runs_per_test_reach_the_test(tests_ws: Workspace) -> None:
    ws = tests_ws
    events = ws.root / "events.json"
    run = ws.kiln(
        "test",
        "//t:env_test",
        "--test_filter=Case.one",
        "--runs_per_test=2",
        f"--build_event_json_file={events}",
    )
    assert run.code == 0, run.err
    for number in (1, 2):
        log = ws.root / f"kiln-testlogs/t/env_test/run_{number}_of_2/test.log"
        assert log.read_text() == f"filter=Case.one run={number}\n"
    assert "Stats over 2 runs: max = " in run.err
    again = ws.kiln("test", "//t:env_test", "--test_filter=Case.one", "--runs_per_test=2")
    assert again.executed == 2  # runs_per_test > 1 is never served from the cache
    results = [json.loads(line) for line in events.read_text().splitlines()]
    tests = [e for e in results if e["type"] == "test_result"]
    assert [(e["label"], e["status"], e["run"], e["runs"]) for e in tests] == [
        ("//t:env_test", "PASSED", 1, 2),
        ("//t:env_test", "PASSED", 2, 2),
    ]
    assert tests[0]["log"] == "kiln-testlogs/t/env_test/run_1_of_2/test.log"


def test_a_test_that_cannot_be_built_has_no_status_and_exits_1(ws: Workspace) -> None:
    ws.write(
        "t/BUILD",
        """
        genrule(name = "broken", outs = ["b.txt"], cmd = "exit 1")
        sh_test(name = "needs_broken_test", srcs = ["t.sh"], data = [":broken"])
        """,
    )
    ws.write("t/t.sh", "true\n")
    run = ws.kiln("test", "//t:needs_broken_test")
    assert run.code == 1
    assert line_of(run.err, "//t:needs_broken_test").endswith(" NO STATUS")
    assert "Executed 0 out of 1 test: 1 was skipped." in run.err


def test_a_crashing_test_fails_with_its_signal(ws: Workspace) -> None:
    ws.write("t/BUILD", 'sh_test(name = "crash_test", srcs = ["crash.sh"])\n')
    ws.write("t/crash.sh", "echo going down\nkill -SEGV $$\n")
    run = ws.kiln("test", "//t:crash_test")
    assert run.code == 3
    log = (ws.root / "kiln-testlogs/t/crash_test/test.log").read_text()
    assert log == "going down\n-- Test killed by signal 11\n"
