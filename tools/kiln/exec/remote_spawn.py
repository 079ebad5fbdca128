"""The executor's seam to a remote executor: inputs by digest in, a result by digest out.

A local spawner needs an execroot of links; a remote one needs the input
root by digest and the action's key, and brings back digests, not files. So
the executor hands a RemoteSpawner the action, its key, the digest of every
input file with where this machine keeps its bytes (a CAS blob, or a source
in the workspace: nothing is hashed or read again), the wheels of its Python
environment the same way (the node makes the environment), and gets back an
ActionResult whose every blob is already in the local CAS, verified against
its digest. The executor then records it and delivers it as it does a cache
hit (executor.py). The Ray implementation is kiln.remote_exec.spawner. How the
command ended is the same record a local spawner returns (spawn.SpawnResult).

    RemoteSpawner.spawn_remote(RemoteSpawn) -> RemoteSpawnResult
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kiln.action_graph import Action
from kiln.cache.action_cache import ActionResult
from kiln.cache.digest import Digest
from kiln.exec.outcome import Source
from kiln.exec.spawn import SpawnResult


@dataclass(frozen=True)
class RemoteInput:
    digest: Digest
    executable: bool
    local_path: Path  # where this machine has the bytes (to upload them if the CAS lacks them)


@dataclass(frozen=True)
class RemoteWheel:
    """A wheel of the action's Python environment, which the node installs (kiln.pyenv.wheels
    fetched it here, checked against the lock): it travels by digest as inputs do."""

    file_name: str
    digest: Digest
    local_path: Path


@dataclass(frozen=True)
class RemoteSpawn:
    action: Action
    key: str  # the action key: the remote action-cache entry goes under it
    inputs: Mapping[str, RemoteInput]  # every input file, by its path in the execroot
    timeout: float | None
    # Set when the result is no longer wanted (--spawn_strategy=dynamic: the local run
    # won): the remote task is cancelled and spawn_remote returns soon.
    give_up: threading.Event | None = None
    # An action with third-party packages (python_env): the wheels its environment
    # installs, those the toolchain does not provide.
    wheels: tuple[RemoteWheel, ...] = ()
    # --sandbox: the node runs the command in a sandbox where its kernel allows, as here.
    sandbox: bool = True

    def local_files(self) -> list[tuple[Digest, Path]]:
        """What the remote needs of this machine: each input file and wheel, by digest."""
        files = [(i.digest, i.local_path) for i in self.inputs.values()]
        return files + [(w.digest, w.local_path) for w in self.wheels]


@dataclass(frozen=True)
class RemoteSpawnResult:
    # How the command ended (spawn.SpawnResult: its lane is the worker node); exit code -1
    # for what failed around it: "refused: ...", "no node ...", "cannot upload ...".
    ended: SpawnResult
    # The result with every blob in the local CAS (exit code 0); None when it failed.
    result: ActionResult | None = None
    output: str = ""  # what the command printed (stdout, then stderr), for a failure
    printed: str = ""  # its stdout, for a success ("INFO: From ...")
    # The cluster could not be reached: the executor may run the action here instead
    # (--remote_local_fallback).
    unreachable: bool = False

    @staticmethod
    def failed(
        message: str,
        *,
        seconds: float = 0.0,
        lane: str = "",
        crashed: bool = False,
        unreachable: bool = False,
    ) -> RemoteSpawnResult:
        """A run that failed before or around its command."""
        ended = SpawnResult(-1, seconds, Source.RAN_REMOTELY, lane, crashed, message)
        return RemoteSpawnResult(ended, unreachable=unreachable)


class RemoteSpawner(Protocol):
    def spawn_remote(self, spawn: RemoteSpawn) -> RemoteSpawnResult:
        """Run the action remotely to its end; thread-safe."""
        ...

    def cancel_all(self) -> None:
        """Ctrl-C: cancel every remote task; spawn_remote() calls return soon, failed."""
        ...

    def close(self) -> None:
        """End of the build: disconnect. Idempotent."""
        ...
