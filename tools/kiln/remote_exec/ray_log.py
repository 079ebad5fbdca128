"""Ray's own log lines, kept off the user's terminal while kiln holds a connection.

`import ray` gives the "ray" logger a handler writing to stderr. Ray's client then
logs what it sees of a lost head ("Unrecoverable error in data channel.", "Log
channel is reconnecting") as ERRORs and WARNINGs, before kiln says the one line
it has to say about it ("lost the Ray cluster ...; running actions here instead").
Those lines are not kiln's output: they are kept here instead, the last few, and
shown as an error's details (--verbose_failures) where kiln reports the cluster
unreachable.

So are exceptions that end one of Ray's or gRPC's own threads. Ray's client closes its
gRPC channel when the head is lost without first ending the channel's connectivity
subscription; gRPC's polling thread then raises "Cannot monitor channel state: Channel
closed!" now and then (a race), and Python would print that thread's traceback.
"""

from __future__ import annotations

import collections
import logging
import threading
import traceback
from types import TracebackType

_KEPT = 40  # the last lines; a lost head logs a handful, a flapping one many


class RayLines(logging.Handler):
    """The last lines Ray logged at WARNING or above, formatted as Ray would."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("%(levelname)s %(filename)s:%(lineno)s -- %(message)s"))
        self._lines: collections.deque[str] = collections.deque(maxlen=_KEPT)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.append(self.format(record))
        except Exception:  # a record that cannot be formatted is not worth a crash
            self.handleError(record)

    def keep(self, line: str) -> None:
        self._lines.append(line)

    def text(self) -> str | None:
        """What Ray said, for an error's details; None if nothing."""
        lines = list(self._lines)
        return "Ray's client logged:\n" + "\n".join(lines) if lines else None


_lock = threading.Lock()
_kept = RayLines()  # one per process, as Ray's loggers are
_THEIR_PACKAGES = frozenset({"ray", "grpc"})
# Our thread hooks, to wrap threading.excepthook only once however often keep_ray_lines
# runs, yet again where another hook replaced ours (pytest does so for each test).
_hooks_keeping: set[object] = set()


def _a_thread_of_theirs(trace: TracebackType | None) -> bool:
    """Whether the thread runs Ray's or gRPC's code: its first frame past `threading`'s
    is theirs (Cython frames included: their globals are the extension module's). A
    thread of kiln's that fails inside a call to Ray is kiln's, and printed."""
    for frame, _ in traceback.walk_tb(trace):
        package = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if package != "threading":
            return package in _THEIR_PACKAGES
    return False


def _keep_their_thread_errors() -> None:
    """Route exceptions that end one of Ray's or gRPC's threads to the kept lines;
    every other thread's to the hook that was there before (Python's prints them)."""
    previous = threading.excepthook

    def keep_theirs(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit or not _a_thread_of_theirs(args.exc_traceback):
            previous(args)
            return
        name = args.thread.name if args.thread is not None else "?"
        error = "".join(traceback.format_exception_only(args.exc_type, args.exc_value))
        _kept.keep(f"ERROR exception in thread {name}: {error.strip()}")

    threading.excepthook = keep_theirs
    _hooks_keeping.add(keep_theirs)


def keep_ray_lines() -> RayLines:
    """Make Ray's loggers write only to the kept lines. Call it after `import ray`, which
    installs Ray's own handler, and again after `ray.init`, which imports the client's
    modules: their log channel's logger does not propagate and has no handler, so Python
    would print its warnings bare on stderr. The same handler for every call. Exceptions
    ending Ray's or gRPC's threads are kept too, from the first call on."""
    with _lock:
        if threading.excepthook not in _hooks_keeping:
            _keep_their_thread_errors()
        ray_logger = logging.getLogger("ray")
        ray_logger.handlers = [_kept]
        ray_logger.propagate = False  # the root logger's handlers are no better a place
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if (
                name.startswith("ray.")
                and isinstance(logger, logging.Logger)
                and not logger.propagate
            ):
                logger.handlers = [_kept]
        return _kept
