"""How an action ended: where its result came from, or why it failed.

Pants' ProcessResultMetadata.Source is the model: the result says in its
type whether it ran (and where) or came from a cache (and which). The
status line, build events, the profile and the summary all read it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from kiln.action_graph import Action

Status = Literal["cached", "executed", "failed"]


class Source(enum.Enum):
    """Where an action's result came from. The values are what kiln prints
    (`(local, 0.25s)`, the summary's `(1 disk, 2 remote)`, build events)."""

    RAN_LOCALLY = "local"
    RAN_IN_WORKER = "worker"
    RAN_REMOTELY = "remote-exec"  # on the remote executor (--remote_executor)
    FILE_WRITE = "write"  # content known at analysis, written without running anything
    DISK_CACHE_HIT = "disk"
    REMOTE_CACHE_HIT = "remote"
    UP_TO_DATE = "up-to-date"  # kiln-out/ already holds it: nothing looked up

    @property
    def is_cache_hit(self) -> bool:
        return _STATUS[self] == "cached"


@dataclass(frozen=True)
class Failure:
    """Why an action failed, and what it printed (stdout and stderr), shown with it."""

    message: str  # "exited with code 2", "timed out after 5 s", "did not create ..."
    output: str = ""


@dataclass(frozen=True)
class ActionOutcome:
    action: Action
    # Where the result came from; for a failure, where the action ran (None if it
    # never started: interrupted, an input it could not read, ...). An outcome
    # without a source always has its Failure.
    source: Source | None
    failure: Failure | None = None
    key: str = ""
    seconds: float = 0.0
    lane: str = ""  # the profile lane: local-N (a scheduler thread) or worker-N
    explanation: str = ""  # --explain: why it was not a cache hit
    remote_miss: bool = False  # the remote cache was asked and had nothing usable
    printed: str = ""  # what a successful action wrote to stdout: Bazel's "INFO: From ..."
    gpus: tuple[str, ...] = ()  # the ids of the GPUs it ran on here (scheduler.py)

    @property
    def status(self) -> Status:
        # Read several times per action (status line, events, summary): one lookup.
        return "failed" if self.failure is not None else _STATUS[self.source]

    @property
    def remote(self) -> Literal["hit", "miss", ""]:
        """The remote cache's answer: hit, miss, or "" (not asked)."""
        if self.source is Source.REMOTE_CACHE_HIT:
            return "hit"
        return "miss" if self.remote_miss else ""

    @property
    def source_name(self) -> str:
        """The source as kiln prints it ("" when the action never started)."""
        return self.source.value if self.source is not None else ""


_STATUS: dict[Source | None, Status] = {
    Source.RAN_LOCALLY: "executed",
    Source.RAN_IN_WORKER: "executed",
    Source.RAN_REMOTELY: "executed",
    Source.FILE_WRITE: "executed",
    Source.DISK_CACHE_HIT: "cached",
    Source.REMOTE_CACHE_HIT: "cached",
    Source.UP_TO_DATE: "cached",
    None: "failed",
}
