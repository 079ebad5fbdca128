"""One worker serves CPU and GPU actions, each action seeing only the GPUs it holds.

CUDA reads CUDA_VISIBLE_DEVICES once per process. A worker runs nothing itself:
each action runs in a fork of it, which gets the action's CUDA_VISIBLE_DEVICES
before anything sets CUDA up, and the worker sees no GPU. So the action that
ModelWeights' worker serves next may be a GPU action, with no worker start of
its own. These tests run Python actions in real workers (no torch: the action
records its worker's pid and what it sees) through the executor, each with the
ids the scheduler would have given it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from kiln.action_graph import PYTHON_INTERPRETER, Action, File, Resources
from kiln.cache.action_cache import ActionCache
from kiln.cache.cas import ContentStore
from kiln.cache.digest_cache import FileDigestCache
from kiln.exec.action_state import ActionState
from kiln.exec.executor import ExecOptions, Executor
from kiln.exec.explain import ExplainLog
from kiln.exec.outcome import Source
from kiln.layout import OutputBase

PROBE = """
# the worker's pid: each action runs in a fork of it
import os, sys
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getppid()} {os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}")
"""


def _executor(tmp_path: Path, *, sandbox: bool) -> Executor:
    root, cache, base = tmp_path / "ws", tmp_path / "cache", tmp_path / "base"
    return Executor(
        workspace_root=root,
        output_base=OutputBase(base),
        cas=ContentStore(cache),
        action_cache=ActionCache(cache),
        digest_cache=FileDigestCache(base / "digests.log", "sha256"),
        explain_log=ExplainLog(base / "explain.pickle"),
        state=ActionState(base / "action-state.pickle", root),
        options=ExecOptions(
            strategy="worker",
            worker_max_instances=2,
            python=sys.executable,
            worker_preload=(),  # the probe needs no torch
            sandbox=sandbox,
        ),
    )


def _probe(name: str, gpus: int) -> Action:
    output = f"kiln-out/app/{name}.txt"
    return Action(
        owner=f"//app:{name}",
        mnemonic="Probe",
        argv=(PYTHON_INTERPRETER, "-m", "tools.probe", output),
        inputs=(File("tools/probe.py"),),
        outputs=(File(output),),
        env=(("PATH", "/usr/bin:/bin"),),
        resources=Resources(cpu=1, gpu=gpus),
        supports_workers=True,
    )


class Probes:
    def __init__(self, executor: Executor, root: Path) -> None:
        self.executor = executor
        self.root = root

    def run(self, name: str, *gpus: str, needs: int | None = None) -> tuple[int, str]:
        """(the worker's pid, its CUDA_VISIBLE_DEVICES) of one action holding `gpus`."""
        action = _probe(name, len(gpus) if needs is None else needs)
        outcome = self.executor.execute(action, "lane", gpus)
        assert outcome.status == "executed", outcome.failure
        assert outcome.source is Source.RAN_IN_WORKER
        pid, seen = (self.root / f"kiln-out/app/{name}.txt").read_text().split(" ")
        return int(pid), seen


@pytest.fixture(params=[True, False], ids=["sandbox", "nosandbox"])
def probes(request: pytest.FixtureRequest, tmp_path: Path) -> Probes:
    root = tmp_path / "ws"
    (root / "tools").mkdir(parents=True)
    (root / "tools/probe.py").write_text(PROBE)
    executor = _executor(tmp_path, sandbox=request.param)
    request.addfinalizer(executor.shutdown)
    return Probes(executor, root)


def _started_with(pid: int) -> str:
    """CUDA_VISIBLE_DEVICES in the environment a worker process was started with."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    found = [e.split(b"=", 1)[1] for e in environ if e.startswith(b"CUDA_VISIBLE_DEVICES=")]
    return found[0].decode() if found else "unset"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def test_one_worker_serves_every_gpu_and_the_cpu_each_action_seeing_its_own(
    probes: Probes,
) -> None:
    cpu, seen = probes.run("cpu", needs=0)
    assert seen == ""
    assert probes.run("on_a", "GPU-a") == (cpu, "GPU-a")
    assert probes.run("on_b", "GPU-b") == (cpu, "GPU-b")
    assert probes.run("on_ab", "GPU-a", "GPU-b") == (cpu, "GPU-a,GPU-b")
    assert probes.run("cpu_again", needs=0) == (cpu, "")
    # The worker itself never sees a GPU, whatever action started it.
    assert _started_with(cpu) == ""


def test_a_worker_started_by_a_gpu_action_sees_no_gpu_itself(probes: Probes) -> None:
    on_a, seen = probes.run("first_on_a", "GPU-a")
    assert seen == "GPU-a"
    assert _started_with(on_a) == ""
    assert probes.run("cpu", needs=0) == (on_a, "")
    assert _alive(on_a)
