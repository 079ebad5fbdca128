"""The executor's cache gate and strategies, against fake spawners (ninja's FakeCommandRunner).

A FakeSpawner records every request and "runs" a command by doing what its argv says
to the execroot: `write` writes each declared output, `fail` exits 1, `forget` writes
nothing, `write-through` appends to its first input, `wait` blocks until cancelled. A
FakeRemote answers as a remote executor does: a result whose blobs are in the local
CAS, or an unreachable cluster. No process starts and nothing imports torch.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from kiln.action_graph import Action, File
from kiln.cache.action_cache import ActionCache, ActionResult, OutputFile
from kiln.cache.cas import ContentStore
from kiln.cache.digest_cache import FileDigestCache
from kiln.exec.action_state import ActionState
from kiln.exec.executor import ExecOptions, Executor, host_settings, sandboxing
from kiln.exec.explain import ExplainLog
from kiln.exec.outcome import Source
from kiln.exec.placement import Placement, PlacementPolicy
from kiln.exec.remote_spawn import RemoteSpawn, RemoteSpawnResult
from kiln.exec.spawn import SpawnRequest, SpawnResult
from kiln.exec.strategies import make_strategies
from kiln.layout import OutputBase


class FakeSpawner:
    sandboxed = False

    def __init__(self) -> None:
        self.requests: list[SpawnRequest] = []
        self.cancelled = threading.Event()

    def spawn(self, request: SpawnRequest) -> SpawnResult:
        self.requests.append(request)
        request.stdout.write_text("said\n")  # a spawner creates both, as a process would
        request.stderr.write_text("")
        command = request.argv[1]
        if command == "wait":
            self.cancelled.wait(30)
            return SpawnResult(-1, 0.0, Source.RAN_LOCALLY, crashed=True, message="interrupted")
        if command == "fail":
            request.stderr.write_text("boom\n")
            return SpawnResult(1, 0.01, Source.RAN_LOCALLY)
        if command == "write-through":
            with (request.execroot / request.inputs[0]).open("a") as written:
                written.write("more")
        if command in ("write", "write-through"):
            for output in request.outputs:
                (request.execroot / output.path).write_text(f"made {output.path}\n")
        return SpawnResult(0, 0.01, Source.RAN_LOCALLY)

    def cancel_all(self) -> None:
        self.cancelled.set()

    def close(self) -> None:
        pass


class FakeRemote:
    """A remote executor whose node 'runs' an action by storing its outputs' bytes."""

    def __init__(self, cas: ContentStore, *, unreachable: bool = False, wait: bool = False):
        self.cas = cas
        self.unreachable = unreachable
        self.wait = wait
        self.spawns: list[RemoteSpawn] = []

    def spawn_remote(self, spawn: RemoteSpawn) -> RemoteSpawnResult:
        self.spawns.append(spawn)
        if self.unreachable:
            return RemoteSpawnResult.failed(
                "the Ray cluster at ray://gone:10001 is unreachable", unreachable=True
            )
        if self.wait:  # until the local run won
            assert spawn.give_up is not None
            spawn.give_up.wait(30)
            return RemoteSpawnResult.failed("cancelled: not needed any more")
        outputs = tuple(
            OutputFile(f.path, self.cas.put_bytes(f"remote {f.path}\n".encode()), False)
            for f in spawn.action.outputs
        )
        result = ActionResult(output_files=outputs, worker="node-1")
        ended = SpawnResult(0, 0.01, Source.RAN_REMOTELY, "node-1")
        return RemoteSpawnResult(ended, result, printed="remote said\n")

    def cancel_all(self) -> None:
        pass

    def close(self) -> None:
        pass


def _action(command: str, *, name: str = "out") -> Action:
    return Action(
        owner=f"//app:{name}",
        mnemonic="Genrule",
        argv=("fake", command),
        inputs=(File("app/src.txt"),),
        outputs=(File(f"kiln-out/app/{name}.txt"),),
        env=(("PATH", "/usr/bin:/bin"),),
    )


class Build:
    """An executor of real caches and execroots whose commands reach fakes."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        placement: Placement | None = None,
        remote: str = "",  # "", "up", "unreachable", "wait"
        fallback: bool = False,
    ) -> None:
        self.root = tmp_path / "ws"
        (self.root / "app").mkdir(parents=True, exist_ok=True)
        (self.root / "app/src.txt").write_text("source\n")
        cache, base = tmp_path / "cache", OutputBase(tmp_path / "base")
        options = ExecOptions(strategy="local", python=sys.executable, sandbox=False)
        cas = ContentStore(cache)
        self.local = FakeSpawner()
        self.racers: list[FakeSpawner] = []
        self.remote = None
        if remote:
            self.remote = FakeRemote(
                cas, unreachable=remote == "unreachable", wait=remote == "wait"
            )
        digests = FileDigestCache(base.root / "digests.log", "sha256")
        strategies = make_strategies(
            self.root,
            base,
            cas,
            digests,
            sandboxing(self.root, base, cas, options, print),
            host_settings(options),
            placement=PlacementPolicy(
                remote=bool(remote), default=placement, local_flavour="local"
            ),
            flavour="local",
            remote_spawner=self.remote,
            remote_local_fallback=fallback,
            local_spawner=self.local,
            racer=self._racer,
        )
        self.executor = Executor(
            workspace_root=self.root,
            output_base=base,
            cas=cas,
            action_cache=ActionCache(cache),
            digest_cache=digests,
            explain_log=ExplainLog(base.root / "explain.pickle"),
            state=ActionState(base.root / "action-state.pickle", self.root),
            options=options,
            strategies=strategies,
        )

    def _racer(self) -> FakeSpawner:
        self.racers.append(FakeSpawner())
        return self.racers[-1]

    def output(self, name: str = "out") -> str:
        return (self.root / f"kiln-out/app/{name}.txt").read_text()


@pytest.fixture
def build(tmp_path: Path) -> Build:
    return Build(tmp_path)


def test_a_miss_runs_the_command_in_an_execroot_of_its_declared_inputs(build: Build) -> None:
    outcome = build.executor.execute(_action("write"), "local-1")
    assert (outcome.status, outcome.source) == ("executed", Source.RAN_LOCALLY)
    (request,) = build.local.requests
    assert request.inputs == ("app/src.txt",)
    assert request.env["TMPDIR"] == str(request.execroot / ".tmp")
    assert outcome.printed == "said\n"
    assert build.output() == "made kiln-out/app/out.txt\n"
    stored = build.executor.action_cache.get(outcome.key)
    assert stored is not None and stored.worker == "local-1"


def test_a_second_run_is_a_disk_cache_hit_that_spawns_nothing(build: Build) -> None:
    first = build.executor.execute(_action("write"), "l")
    (build.root / "kiln-out/app/out.txt").unlink()
    again = Build(build.root.parent)  # a new build on the same disk cache
    second = again.executor.execute(_action("write"), "l")
    assert (first.source, second.source) == (Source.RAN_LOCALLY, Source.DISK_CACHE_HIT)
    assert (len(build.local.requests), again.local.requests) == (1, [])
    assert build.output() == "made kiln-out/app/out.txt\n"


def test_a_failing_command_fails_with_its_exit_code_and_output_and_stores_nothing(
    build: Build,
) -> None:
    outcome = build.executor.execute(_action("fail"), "l")
    assert outcome.failure is not None
    assert (outcome.failure.message, outcome.failure.output) == (
        "exited with code 1",
        "said\nboom\n",
    )
    assert outcome.source is Source.RAN_LOCALLY
    assert build.executor.action_cache.get(outcome.key) is None
    assert not (build.root / "kiln-out/app/out.txt").exists()


def test_a_missing_declared_output_fails_the_action(build: Build) -> None:
    outcome = build.executor.execute(_action("forget"), "l")
    assert outcome.failure is not None
    assert outcome.failure.message == "did not create declared output kiln-out/app/out.txt"
    assert build.executor.action_cache.get(outcome.key) is None


def test_a_write_through_an_input_fails_the_action(build: Build) -> None:
    outcome = build.executor.execute(_action("write-through"), "l")
    assert outcome.failure is not None
    assert outcome.failure.message == (
        "modified its input app/src.txt, a source file (inputs are read-only; write to a "
        "declared output instead)"
    )
    assert build.executor.action_cache.get(outcome.key) is None


def test_remote_placement_delivers_the_nodes_result(tmp_path: Path) -> None:
    build = Build(tmp_path, placement="remote", remote="up")
    outcome = build.executor.execute(_action("write"), "l")
    assert (outcome.source, outcome.lane, outcome.printed) == (
        Source.RAN_REMOTELY,
        "node-1",
        "remote said\n",
    )
    assert build.local.requests == []
    assert build.remote is not None and build.remote.spawns[0].key == outcome.key
    assert build.output() == "remote kiln-out/app/out.txt\n"


def test_an_unreachable_cluster_fails_the_action_without_fallback(tmp_path: Path) -> None:
    build = Build(tmp_path, placement="remote", remote="unreachable")
    outcome = build.executor.execute(_action("write"), "l")
    assert outcome.failure is not None and outcome.source is None
    assert "ray://gone:10001 is unreachable" in outcome.failure.message
    assert build.local.requests == []


def test_an_unreachable_cluster_runs_the_action_here_with_fallback(tmp_path: Path) -> None:
    build = Build(tmp_path, placement="remote", remote="unreachable", fallback=True)
    outcome = build.executor.execute(_action("write"), "l")
    assert (outcome.status, outcome.source) == ("executed", Source.RAN_LOCALLY)
    assert len(build.local.requests) == 1
    assert build.output() == "made kiln-out/app/out.txt\n"


def test_dynamic_the_remote_win_kills_the_local_run(tmp_path: Path) -> None:
    build = Build(tmp_path, placement="dynamic", remote="up")
    outcome = build.executor.execute(_action("wait"), "l")
    assert (outcome.status, outcome.source) == ("executed", Source.RAN_REMOTELY)
    (racer,) = build.racers
    assert racer.cancelled.is_set() and len(racer.requests) == 1
    assert build.output() == "remote kiln-out/app/out.txt\n"


def test_dynamic_the_local_win_cancels_the_remote_run(tmp_path: Path) -> None:
    build = Build(tmp_path, placement="dynamic", remote="wait")
    start = time.monotonic()
    outcome = build.executor.execute(_action("write"), "l")
    assert (outcome.status, outcome.source) == ("executed", Source.RAN_LOCALLY)
    assert time.monotonic() - start < 20  # the remote run was given up, not waited for
    assert build.remote is not None
    (spawn,) = build.remote.spawns
    assert spawn.give_up is not None and spawn.give_up.is_set()
    assert build.output() == "made kiln-out/app/out.txt\n"


def test_after_ctrl_c_the_spawner_is_cancelled_and_nothing_is_stored(build: Build) -> None:
    build.executor.interrupt()
    assert build.local.cancelled.is_set()
    outcome = build.executor.execute(_action("write"), "l")
    assert outcome.failure is not None and outcome.failure.message == "interrupted"
    assert build.executor.action_cache.get(outcome.key) is None
