"""The one interface the executor runs commands through: Spawner.spawn(request) -> result.

run_in_execroot.py prepares an execroot holding the action's declared inputs
and hands a SpawnRequest to a spawner; the spawner runs the command there and
says how it ended. It knows nothing of keys, caches or outputs: the runner
collects the outputs from the execroot afterwards.

    LocalSpawner   (local_spawner.py)   a child process in its own process group
    WorkerSpawner  (worker_spawner.py)  a persistent worker (`python -m` actions)
    SupervisorSpawner (remote_exec/supervisor.py)  on a worker node: a command that
                   never outlives its Ray task

The one execroot runner (run_in_execroot.py) drives each of them, on the
driver and on a worker node alike. The remote strategy does not hand the
driver's commands to a Spawner: a remote executor needs inputs by digest,
not an execroot, so it has its own seam (remote_spawn.py), whose result
holds a SpawnResult too: one record says how a command ended, wherever.

A Python action's argv[0] is the name PYTHON_INTERPRETER ("python"), never a
path (so keys are the same wherever Python is installed): each spawner
resolves it to the interpreter it runs Python with (resolve_argv). A remote
spawner resolves it on its machine, to the interpreter of the environment
that machine holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kiln.action_graph import PYTHON_INTERPRETER, File, Resources
from kiln.exec.outcome import Source


def resolve_argv(argv: tuple[str, ...], python: str) -> tuple[str, ...]:
    """The command to execute: argv with a symbolic PYTHON_INTERPRETER as `python`."""
    if argv and argv[0] == PYTHON_INTERPRETER:
        return (python, *argv[1:])
    return argv


@dataclass(frozen=True)
class SpawnRequest:
    argv: tuple[str, ...]  # as the action declares it: argv[0] may be PYTHON_INTERPRETER
    env: Mapping[str, str]  # the command's whole environment
    execroot: Path  # its working directory, holding exactly its declared inputs
    stdout: Path  # created (or truncated) by the spawner
    stderr: Path
    timeout: float | None  # seconds; past it the command and what it started are killed
    resources: Resources  # what the scheduler reserved for it
    # What the executor collects from the execroot afterwards (files and directories).
    outputs: tuple[File, ...] = ()
    # The declared input files, relative to the execroot (which holds exactly these):
    # what a sandbox shows the command, what a remote spawner ships.
    inputs: tuple[str, ...] = ()
    # What the machine must offer (os, arch, GPU compute capability, toolchain versions).
    platform: tuple[tuple[str, str], ...] = ()
    description: str = ""  # "Executing genrule //app:x", for messages


@dataclass(frozen=True)
class SpawnResult:
    exit_code: int
    seconds: float  # wall time of the command, as the spawner measured it
    source: Source  # where it ran
    lane: str = ""  # the profile lane, for a spawner that has its own (worker-2)
    crashed: bool = False  # killed by a signal, or its worker died under it
    message: str = ""  # why it ended abnormally: "timed out after 5 s", "killed by signal ..."

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and not self.crashed

    @property
    def failure_message(self) -> str:
        return self.message or f"exited with code {self.exit_code}"


class Spawner(Protocol):
    @property
    def sandboxed(self) -> bool:
        """Whether its commands run in a sandbox (which path they see torch's state at)."""
        ...

    def spawn(self, request: SpawnRequest) -> SpawnResult:
        """Run the command to its end; thread-safe (the scheduler's threads call it)."""
        ...

    def cancel_all(self) -> None:
        """Ctrl-C: kill every running command and what it started; their spawn() return,
        and a spawn() after this returns at once, crashed, "interrupted"."""
        ...

    def close(self) -> None:
        """End of the build: release processes and connections. Idempotent."""
        ...
