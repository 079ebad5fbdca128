"""Python actions give the same results in a persistent worker as in a plain process,
and a worker that crashes fails only its own action."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kiln.action_graph import PYTHON_INTERPRETER, Action, File
from kiln.cache.action_cache import ActionCache
from kiln.cache.cas import ContentStore
from kiln.cache.digest_cache import FileDigestCache
from kiln.exec.action_state import ActionState
from kiln.exec.executor import ExecOptions, Executor
from kiln.exec.explain import ExplainLog
from kiln.exec.outcome import Source
from kiln.layout import OutputBase

ACTION = """
import os, sys
inp = open("tools/data.txt").read()
os.makedirs("kiln-out/app", exist_ok=True)
with open("kiln-out/app/result.txt", "w") as f:
    f.write(inp.upper() + os.environ["GREETING"] + " " + " ".join(sys.argv[1:]))
print("done", flush=True)
if inp.startswith("crash"):
    os._exit(9) if "exit" in inp else os.kill(os.getpid(), 11)
"""


def _executor(tmp_path: Path, strategy: str, *, sandbox: bool = True) -> Executor:
    root = tmp_path / "ws"
    cache = tmp_path / f"cache-{strategy}"
    base = tmp_path / f"base-{strategy}"
    return Executor(
        workspace_root=root,
        output_base=OutputBase(base),
        cas=ContentStore(cache),
        action_cache=ActionCache(cache),
        digest_cache=FileDigestCache(base / "digests.log", "sha256"),
        explain_log=ExplainLog(base / "explain.pickle"),
        state=ActionState(base / "action-state.pickle", root),
        options=ExecOptions(
            strategy=strategy,  # type: ignore[arg-type]
            worker_max_instances=1,
            python=sys.executable,
            worker_preload=(),  # the test action needs no torch
            sandbox=sandbox,
        ),
    )


def _action() -> Action:
    return Action(
        owner="//app:result",
        mnemonic="PyAction",
        argv=(PYTHON_INTERPRETER, "-m", "tools.act", "a", "b"),
        inputs=(File("tools/act.py"), File("tools/data.txt")),
        outputs=(File("kiln-out/app/result.txt"),),
        env=(("GREETING", "hi"), ("PATH", "/usr/bin:/bin")),
        supports_workers=True,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "tools").mkdir(parents=True)
    (root / "tools/act.py").write_text(ACTION)
    (root / "tools/data.txt").write_text("payload")
    return root


def test_worker_and_local_strategies_give_identical_outputs(
    workspace: Path, tmp_path: Path
) -> None:
    results = {}
    for strategy in ("local", "worker"):
        executor = _executor(tmp_path, strategy)
        try:
            outcome = executor.execute(_action(), "lane")
        finally:
            executor.shutdown()
        assert outcome.status == "executed", outcome.failure
        assert (
            outcome.source
            == {"local": Source.RAN_LOCALLY, "worker": Source.RAN_IN_WORKER}[strategy]
        )
        stored = executor.action_cache.get(outcome.key)
        assert stored is not None
        assert stored.execution_seconds > 0  # measured in a worker too
        results[strategy] = (
            outcome.key,
            (workspace / "kiln-out/app/result.txt").read_bytes(),
            outcome.printed,
            stored.stdout_digest,
            stored.stderr_digest,
        )
        (workspace / "kiln-out/app/result.txt").unlink()
    assert results["local"] == results["worker"]
    assert results["worker"][1:3] == (b"PAYLOADhi a b", "done\n")


@pytest.mark.parametrize("how", ["crash-signal", "crash-exit"])
def test_a_crashing_worker_fails_only_its_action(workspace: Path, tmp_path: Path, how: str) -> None:
    executor = _executor(tmp_path, "worker")
    try:
        (workspace / "tools/data.txt").write_text(how)
        crashed = executor.execute(_action(), "lane")
        assert crashed.status == "failed"
        assert crashed.failure is not None
        assert ("signal" in crashed.failure.message) or ("9" in crashed.failure.message)
        assert crashed.source is Source.RAN_IN_WORKER
        assert not (workspace / "kiln-out/app/result.txt").exists()
        # The next action gets a fresh worker and succeeds.
        (workspace / "tools/data.txt").write_text("fine")
        outcome = executor.execute(_action(), "lane")
        assert outcome.status == "executed", outcome.failure
        assert (workspace / "kiln-out/app/result.txt").read_text() == "FINEhi a b"
    finally:
        executor.shutdown()


def test_a_second_run_is_a_cache_hit_with_the_same_outputs(workspace: Path, tmp_path: Path) -> None:
    executor = _executor(tmp_path, "local")
    first = executor.execute(_action(), "lane")
    (workspace / "kiln-out/app/result.txt").unlink()
    second = executor.execute(_action(), "lane")
    assert (first.status, second.status) == ("executed", "cached")
    assert (workspace / "kiln-out/app/result.txt").read_text() == "PAYLOADhi a b"
