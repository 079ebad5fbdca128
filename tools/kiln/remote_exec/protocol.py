"""What crosses from the driver to a worker node's Ray task, and back: digests, never bytes.

Both are plain frozen dataclasses that Ray pickles. The task carries the
Action itself (kiln.action_graph: argv, env, outputs, platform), so the node
checks and runs exactly what the driver keyed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.action_graph import Action
from kiln.cache.action_cache import ActionResult
from kiln.exec.outcome import Source
from kiln.exec.spawn import SpawnResult
from kiln.remote.options import RemoteOptions


@dataclass(frozen=True)
class TaskInput:
    path: str
    hash: str
    size: int
    executable: bool


@dataclass(frozen=True)
class TaskWheel:
    """A wheel the node's Python environment for the action installs (action.python_env
    less what the toolchain provides): its bytes are the blob `hash` in the remote cache."""

    file_name: str  # the wheel's own name, which pip reads its name, version and tags from
    hash: str  # of the cache's digest function
    size: int


@dataclass(frozen=True)
class RemoteTask:
    action: Action
    key: str
    inputs: tuple[TaskInput, ...]
    digest_function: str
    remote: RemoteOptions  # the driver's --remote_*: the node's store is opened from it
    timeout: float | None
    # The wheels of the action's third-party packages, for an action with a python_env;
    # the node makes the environment from these alone (node_env.py).
    wheels: tuple[TaskWheel, ...] = ()
    sandbox: bool = True  # --sandbox: the node sandboxes the command where it can


@dataclass(frozen=True)
class TaskResult:
    # How the command ended, the one record every spawner returns (its lane: the node
    # that ran it, for messages and the profile); exit code -1 for what failed around it
    # ("cannot fetch inputs: ...", "refused by worker ...").
    ended: SpawnResult
    output: str = ""  # stdout then stderr (64 KiB at most each), for a failure
    printed: str = ""  # stdout, for a success
    # The result, exit code 0, every blob in the remote cache and the entry written
    # under the key; None for a failure.
    result: ActionResult | None = None
    refused: bool = False  # the node does not match the action's fingerprint
    # What the node said while it made the action's Python environment ("" lines where
    # it had one): shown by the driver, which otherwise sees only a long action.
    notes: tuple[str, ...] = ()

    @staticmethod
    def failed(node: str, message: str, **fields: object) -> TaskResult:
        """What failed around the command on `node` (it did not run, or its outputs
        could not be stored): exit code -1 and why."""
        ended = SpawnResult(-1, 0.0, Source.RAN_REMOTELY, node, message=message)
        return TaskResult(ended, **fields)  # type: ignore[arg-type]

    # Read-only views of `ended`, for the driver's messages.
    @property
    def node(self) -> str:
        return self.ended.lane

    @property
    def exit_code(self) -> int:
        return self.ended.exit_code

    @property
    def crashed(self) -> bool:
        return self.ended.crashed

    @property
    def seconds(self) -> float:
        return self.ended.seconds

    @property
    def message(self) -> str:
        return self.ended.message
