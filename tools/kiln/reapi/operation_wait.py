"""How long the driver waits on one remote execution, and what it asks next.

A REAPI Execute is a stream of Operations that ends when the action is done.
Nothing in the protocol bounds that stream: a server that restarts, drops a
notification or loses a lease can leave it open and silent for ever (BuildGrid
re-sends an unchanged operation only every operation-stream-keepalive-timeout,
600 s by default). So, as Bazel's remote executor does:

    each call           Execute, or WaitExecution(name) once the operation has a
                        name, gets --remote_timeout as its deadline: a silent stream
                        is asked again, and WaitExecution's first answer is the
                        operation as the server has it now (a missed "done" is seen)
    NOT_FOUND           the server forgot the operation (restarted without its
                        database): Execute again; the server deduplicates it
    no answer           calls that fail (down, restarting, silent) for longer than
                        --remote_timeout in a row: the action fails, one error
    stuck executing     an operation that still executes --remote_timeout past the
                        action's own timeout: the action fails (its worker is gone and
                        the server did not notice)

A long action is not cut short: every call that brings an operation back counts
as an answer. Only a queue is waited on without bound, as Bazel does: a farm may
be busy, and a queue the server keeps is not a hang of this side.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from kiln.cache.remote_store import RemoteError

# Answers after which the same operation may still come: asked again after a pause.
RESUMABLE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.CANCELLED,  # the server's side cancelled on its shutdown
    grpc.StatusCode.RESOURCE_EXHAUSTED,  # BuildGrid's "Concurrent RPC limit exceeded!"
)
_PAUSE_S = (0.5, 1.0, 2.0, 4.0)  # between failed calls: a restarting server is given time


@dataclass
class OperationWait:
    remote_timeout: float  # --remote_timeout
    action_timeout: float | None  # the action's own; None: no bound while it executes
    clock: Callable[[], float] = time.monotonic
    name: str = ""  # the operation's, once the server gave one: WaitExecution, not Execute
    _failing_since: float | None = None
    _failures: int = 0
    _executing_since: float | None = None
    _answered_this_call: bool = False

    @property
    def call_deadline(self) -> float:
        return self.remote_timeout

    def calling(self) -> None:
        """A new Execute or WaitExecution call starts."""
        self._answered_this_call = False

    def answered(self, name: str, executing: bool) -> None:
        """The server sent the operation (not done): it is alive and has it."""
        self.name = name or self.name
        self._answered_this_call = True
        self._failing_since, self._failures = None, 0
        now = self.clock()
        if executing and self._executing_since is None:
            self._executing_since = now
        self._check_executing(now)

    def failed(self, code: grpc.StatusCode | None, text: str) -> float:
        """A call ended with `code`: the seconds to pause before the next one, or RemoteError."""
        now = self.clock()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and self._answered_this_call:
            # The stream was silent for --remote_timeout after an answer: a long action
            # or a missed update. Ask again at once; WaitExecution answers with its state.
            self._check_executing(now)
            return 0.0
        if code == grpc.StatusCode.NOT_FOUND and self.name:
            self.name = ""  # forgotten: Execute again
        elif code not in RESUMABLE:
            raise RemoteError(f"Execute: {text}")
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since > self.remote_timeout:
            raise RemoteError(
                f"Execute: no answer from the server for {now - self._failing_since:.0f} s "
                f"(--remote_timeout={self.remote_timeout:g}): {text}"
            )
        self._check_executing(now)
        pause = _PAUSE_S[min(self._failures, len(_PAUSE_S) - 1)]
        self._failures += 1
        return pause

    def _check_executing(self, now: float) -> None:
        if self.action_timeout is None or self._executing_since is None:
            return
        running = now - self._executing_since
        if running > self.action_timeout + self.remote_timeout:
            raise RemoteError(
                f"Execute: still executing {running:.0f} s after it started, past the "
                f"action's timeout ({self.action_timeout:g} s) and --remote_timeout "
                f"({self.remote_timeout:g} s): the server lost its worker"
            )
