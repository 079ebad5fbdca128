"""python -m kiln.actions.test_runner -- COMMAND...: run one test target, as Bazel's
test setup does, inside the test action's execroot (sandboxed like any action).

Read from the environment (set by the rule, and by `kiln test`'s flags, so in the key):

    TEST_TARGET          the test's label
    TEST_TIMEOUT         seconds before the test is killed (its process group)
    KILN_TEST_ATTEMPTS   attempts before a failure counts (--flaky_test_attempts, flaky)
    KILN_TEST_OUTPUTS    the action's output directory

A pass (at any attempt) writes test.log, test.xml and result.json there, prints nothing and
exits 0: the executor caches it. Anything else prints the log and, last, the result line
(kiln.test_results), and exits 1: nothing is cached. The test itself gets TEST_TMPDIR,
XML_OUTPUT_FILE and TEST_UNDECLARED_OUTPUTS_DIR (kept in undeclared_outputs/ when it
passes) as Bazel's tests do; a test that writes XML_OUTPUT_FILE gives its own JUnit XML.
`python` as COMMAND's first word is this interpreter.

Under `bazel test` (kiln_rule.bzl's launcher runs this as the test), XML_OUTPUT_FILE is
set for the runner itself: it writes the run's JUnit XML there, pass or fail, and prints
a passing test's log too, so Bazel's test.log and test.xml hold what kiln's do.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from kiln.test_results import LOG, RESULT, RESULT_PREFIX, XML, Status, TestRun, junit_xml

# After SIGTERM at the timeout, how long the test gets to end before SIGKILL.
_GRACE_SECONDS = 2.0


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        sys.stderr.write("usage: python -m kiln.actions.test_runner -- COMMAND...\n")
        return 2
    if command[0] == "python":
        command = [sys.executable, *command[1:]]
    label = os.environ.get("TEST_TARGET", "test")
    timeout = float(os.environ.get("TEST_TIMEOUT", "300"))
    attempts = max(1, int(os.environ.get("KILN_TEST_ATTEMPTS", "1")))
    outputs = Path(os.environ.get("KILN_TEST_OUTPUTS", "."))
    outputs.mkdir(parents=True, exist_ok=True)
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "kiln-test"
    scratch.mkdir(parents=True, exist_ok=True)
    bazel_xml = os.environ.get("XML_OUTPUT_FILE")  # Bazel's, for this test: see above

    logs: list[str] = []
    status: Status = "FAILED"
    start = time.monotonic()
    for attempt in range(1, attempts + 1):
        status, log = _attempt(command, timeout, scratch / f"attempt_{attempt}")
        logs.append(log)
        if status == "PASSED":
            break
    seconds = time.monotonic() - start
    if status == "PASSED" and len(logs) > 1:
        status = "FLAKY"
    run = TestRun(status, round(seconds, 3), len(logs))
    log = logs[-1]
    own_xml = scratch / f"attempt_{len(logs)}" / "test.xml"
    xml = own_xml.read_text(encoding="utf-8") if own_xml.is_file() else junit_xml(label, run, log)
    if bazel_xml:
        Path(bazel_xml).write_text(xml, encoding="utf-8")
        if run.passed:
            sys.stdout.write(log)
    if not run.passed:
        sys.stdout.write(log)
        if log and not log.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
        sys.stderr.write(RESULT_PREFIX + run.to_json() + "\n")
        return 1
    (outputs / LOG).write_text(log, encoding="utf-8")
    (outputs / XML).write_text(xml, encoding="utf-8")
    (outputs / RESULT).write_text(run.to_json() + "\n", encoding="utf-8")
    undeclared = scratch / f"attempt_{len(logs)}" / "undeclared"
    if undeclared.is_dir():  # what the test left in TEST_UNDECLARED_OUTPUTS_DIR, as Bazel
        shutil.copytree(undeclared, outputs / "undeclared_outputs", dirs_exist_ok=True)
    if len(logs) > 1:  # Bazel keeps the failed attempts' logs beside the last one's
        kept = outputs / "test_attempts"
        kept.mkdir(exist_ok=True)
        for number, earlier in enumerate(logs[:-1], start=1):
            (kept / f"attempt_{number}.log").write_text(earlier, encoding="utf-8")
    return 0


def _attempt(command: list[str], timeout: float, scratch: Path) -> tuple[Status, str]:
    """Run the test once in its own process group: (how it ended, what it printed)."""
    scratch.mkdir(parents=True, exist_ok=True)
    tmp = scratch / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_TEST_")}
    env.update(
        TEST_TMPDIR=str(tmp.resolve()),
        XML_OUTPUT_FILE=str((scratch / "test.xml").resolve()),
        TEST_UNDECLARED_OUTPUTS_DIR=str((scratch / "undeclared").resolve()),
    )
    log_path = scratch / "output.log"
    with log_path.open("wb") as log:
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as error:
            return "FAILED", f"cannot start the test: {error.strerror} ({command[0]})\n"
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            text = log_path.read_text(encoding="utf-8", errors="replace")
            return "TIMEOUT", text + f"-- Test timed out after {timeout:g} s (TEST_TIMEOUT)\n"
        finally:
            _kill_group(process, gently=False)  # what the test left running dies with it
    text = log_path.read_text(encoding="utf-8", errors="replace")
    if code == 0:
        return "PASSED", text
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return "FAILED", text + f"-- Test {how}\n"


def _kill_group(process: subprocess.Popen[bytes], *, gently: bool = True) -> None:
    try:
        if gently:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=_GRACE_SECONDS)
                return
            except subprocess.TimeoutExpired:
                pass
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    process.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
