"""A persistent worker: `python -m kiln.workers.main --request-fd R --response-fd W --preload M`.

Imports the preload modules once (a module that fails to import is reported
in the hello frame, not fatal), then runs one request at a time until the
request pipe reaches end of file. See protocol.py for the frames and
inprocess.py for what each action sees. The pool starts it in a new session
with stdin and stdout on /dev/null and stderr on its log.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from kiln.workers.inprocess import SetupError, run_request
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
    parser.add_argument("--preload", action="append", default=[])
    options = parser.parse_args(argv)
    requests, responses = options.request_fd, options.response_fd
    for fd in (requests, responses):
        os.set_inheritable(fd, False)  # never leak the protocol into an action's children

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
    pid = os.getpid()
    try:
        request = WorkRequest.from_json(message)
        status = run_request(request, baseline)
    except (KeyError, TypeError, AttributeError, ValueError, SetupError) as e:
        return {"exit_code": 1, "error": str(e)}
    if os.getpid() != pid:
        os._exit(status)  # a process the action forked returned from it: it ends here
    return {"exit_code": status}


if __name__ == "__main__":
    raise SystemExit(main())
