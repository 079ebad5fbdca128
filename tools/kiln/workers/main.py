"""A persistent worker: `python -m kiln.workers.main --request-fd R --response-fd W
--lifeline-fd L --preload M`.

Imports the preload modules once (a module that fails to import is reported
in the hello frame, not fatal), then runs one request at a time, each in a child
forked from that state (forking.py: no state crosses actions), until the request
pipe reaches end of file. See protocol.py for the frames and inprocess.py for what
each action sees. The pool starts it in a new session
with stdin and stdout on /dev/null and stderr on its log.

The lifeline is a pipe kiln never writes to: its end of file means kiln is
gone, however it ended (kill -9 included). A watchdog thread waits for it and
then kills the worker's process group: the worker and every process its
action started, which would otherwise run on, writing into an execroot
nobody reads. Not PR_SET_PDEATHSIG: it fires when the *thread* that started
the worker ends (a scheduler thread), and would kill the worker before the
watchdog could kill what its action started.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

from kiln import process_tree
from kiln.workers.forking import run_forked
from kiln.workers.isolation import Baseline
from kiln.workers.protocol import ProtocolError, WorkRequest, read_frame, write_frame


def main(argv: Sequence[str] | None = None) -> int:
    # `python -m` put the directory the worker started in on sys.path; an action
    # gets its own execroot there instead.
    if sys.path and sys.path[0] == os.getcwd():
        del sys.path[0]
    parser = argparse.ArgumentParser(prog="python -m kiln.workers.main")
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--response-fd", type=int, required=True)
    parser.add_argument("--lifeline-fd", type=int, default=None)
    parser.add_argument("--preload", action="append", default=[])
    options = parser.parse_args(argv)
    requests, responses = options.request_fd, options.response_fd
    for fd in (requests, responses, options.lifeline_fd):
        if fd is not None:
            os.set_inheritable(fd, False)  # never leak the protocol into an action's children
    if options.lifeline_fd is not None:
        watch_lifeline(options.lifeline_fd)

    # What an action leaves running, even in a session of its own, becomes the worker's
    # child once the action ends: forking.run_forked kills it.
    process_tree.become_subreaper()
    errors = preload(options.preload)
    write_frame(responses, {"pid": os.getpid(), "preload_errors": errors})
    baseline = Baseline.capture()
    while True:
        try:
            message = read_frame(requests)
        except ProtocolError as e:
            print(f"kiln worker: bad request stream: {e}", file=sys.stderr)
            return 2
        if message is None:
            return 0
        try:
            write_frame(responses, serve(message, baseline))
        except BrokenPipeError:
            return 0  # the pool is gone


def watch_lifeline(fd: int) -> threading.Thread:
    """Kill this worker's process group once `fd` reaches end of file (kiln is gone)."""

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass  # kiln never writes; read on until the end of file
        except OSError:
            pass  # a broken lifeline means the same
        if os.getpgrp() == os.getpid():  # the pool made the worker its group's leader
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="kiln-lifeline", daemon=True)
    thread.start()
    return thread


def preload(modules: Sequence[str]) -> dict[str, str]:
    """Import each module; the ones that fail, with a one-line reason."""
    errors: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except (Exception, SystemExit) as e:
            traceback.print_exc()  # the whole story goes to the worker's log
            errors[name] = "".join(traceback.format_exception_only(e)).strip()
    return errors


def serve(message: dict[str, Any], baseline: Baseline) -> dict[str, Any]:
    try:
        request = WorkRequest.from_json(message)
        request.module  # noqa: B018 - a request without `-m module` is refused here
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        return {"exit_code": 1, "error": str(e)}
    return run_forked(request, baseline)


if __name__ == "__main__":
    raise SystemExit(main())
