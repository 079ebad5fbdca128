"""Ray's own log lines, kept off the user's terminal while kiln holds a connection.

`import ray` gives the "ray" logger a handler writing to stderr. Ray's client then
logs what it sees of a lost head ("Unrecoverable error in data channel.", "Log
channel is reconnecting") as ERRORs and WARNINGs, before kiln says the one line
it has to say about it ("lost the Ray cluster ...; running actions here instead").
Those lines are not kiln's output: they are kept here instead, the last few, and
shown as an error's details (--verbose_failures) where kiln reports the cluster
unreachable.
"""

from __future__ import annotations

import collections
import logging
import threading

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

    def text(self) -> str | None:
        """What Ray said, for an error's details; None if nothing."""
        lines = list(self._lines)
        return "Ray's client logged:\n" + "\n".join(lines) if lines else None


_lock = threading.Lock()
_kept = RayLines()  # one per process, as Ray's loggers are


def keep_ray_lines() -> RayLines:
    """Make Ray's loggers write only to the kept lines. Call it after `import ray`, which
    installs Ray's own handler, and again after `ray.init`, which imports the client's
    modules: their log channel's logger does not propagate and has no handler, so Python
    would print its warnings bare on stderr. The same handler for every call."""
    with _lock:
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
