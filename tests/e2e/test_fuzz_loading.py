"""The soak's fuzz half (issue 11, deliverable 10): 20,000 random labels, query
expressions and mutated BUILD/.bzl files through `kiln query`, with no Python
traceback and no exit code but 0 and 1. The cases run in one separate process
(tests/fuzz_loading.py), so that a crash of the interpreter fails this test
instead of killing the test run; README.md ("Robustness") quotes the counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CASES = 20_000


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fuzzed_labels_queries_and_build_files_never_crash_kiln(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tests.fuzz_loading", f"--cases={CASES}", "--seed=11",
         f"--workdir={tmp_path}"],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=880,
        check=False,
    )  # fmt: skip
    last = (tmp_path / "current-case.txt").read_text() if run.returncode < 0 else ""
    assert run.returncode in (0, 1), f"died by signal {-run.returncode} in {last}"
    result = json.loads(run.stdout.splitlines()[-1])
    with capsys.disabled():  # the figures README.md quotes
        summary = {k: result[k] for k in ("tracebacks", "other_exit_codes", "exits")}
        print(f"\nfuzz: {CASES} cases, {json.dumps(summary)}")
    assert (result["tracebacks"], result["other_exit_codes"]) == (0, 0), result["failures"]
    assert sum(result["by_kind"].values()) == CASES
    for kind in ("label", "query", "build_file"):  # each kind both passes and fails somewhere
        assert result["exits"][f"{kind} exit 0"] > 0
        assert result["exits"][f"{kind} exit 1"] > 0
