"""The soak's fuzz half (issue 11, deliverable 10): 20,000 random labels, query
expressions and mutated BUILD/.bzl files through `kiln query`, with no Python
traceback and no exit code but 0 and 1. The cases run in separate processes
(tests/fuzz_loading.py), so that a crash of the interpreter fails this test
instead of killing the test run: SHARDS of them at once, each every SHARDS-th
case of the one seed, their counts added up. README.md ("Robustness") quotes them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

CASES = 20_000
SHARDS = 2  # the machine's two cores


def _start(shard: int, workdir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fuzz_loading", f"--cases={CASES}", "--seed=11",
         f"--shard={shard}/{SHARDS}", f"--workdir={workdir}"],
        cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fuzzed_labels_queries_and_build_files_never_crash_kiln(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    processes = [_start(shard, tmp_path / str(shard)) for shard in range(SHARDS)]
    results = []
    for shard, process in enumerate(processes):
        out, _ = process.communicate(timeout=880)
        progress = tmp_path / str(shard) / "current-case.txt"
        last = progress.read_text() if process.returncode < 0 else ""
        assert process.returncode in (0, 1), f"died by signal {-process.returncode} in {last}"
        results.append(json.loads(out.splitlines()[-1]))
    result = {
        "by_kind": sum((Counter(r["by_kind"]) for r in results), Counter()),
        "exits": dict(sorted(sum((Counter(r["exits"]) for r in results), Counter()).items())),
        "tracebacks": sum(r["tracebacks"] for r in results),
        "other_exit_codes": sum(r["other_exit_codes"] for r in results),
        "failures": [f for r in results for f in r["failures"]],
    }
    with capsys.disabled():  # the figures README.md quotes
        summary = {k: result[k] for k in ("tracebacks", "other_exit_codes", "exits")}
        print(f"\nfuzz: {CASES} cases, {json.dumps(summary)}")
    assert (result["tracebacks"], result["other_exit_codes"]) == (0, 0), result["failures"]
    assert sum(result["by_kind"].values()) == CASES
    for kind in ("label", "query", "build_file"):  # each kind both passes and fails somewhere
        assert result["exits"][f"{kind} exit 0"] > 0
        assert result["exits"][f"{kind} exit 1"] > 0
