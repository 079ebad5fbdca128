"""The sandbox server: `python -m kiln.sandbox.server --request-fd R --response-fd W
--lifeline-fd L --config JSON`, one per build, running every local command in a sandbox.

At start it becomes root of a user namespace with a private mount namespace
(linux.enter_user_namespace) and says whether that worked:

    server -> kiln, once:    {"ready": true}  or  {"error": "unshare: Operation not permitted"}
    kiln -> server:          {"op": "spawn", "id": 7, "argv": [...], "env": {...}, "cwd": "...",
                              "stdout": "...", "stderr": "...", "binds": [[src, dst, rw], ...]}
                             {"op": "kill", "id": 7}
    server -> kiln:          {"id": 7, "pid": 1234}             the command started
                             {"id": 7, "status": 0}              it ended (-N: killed by signal N)
                             {"id": 7, "error": "cannot run x: ..."}   it never started

For each command it forks a child that takes a mount namespace of its own,
builds the root (rootfs.py: the config's part and the command's binds),
enters it and executes the command in a session of its own: its pid is its
process group, which a kill request ends whole. The server is single-threaded
and stays small, so forking it costs little. Frames are the workers'
(kiln.workers.protocol). At the end of its request pipe, or of the lifeline
(kiln is gone, kill -9 included), it kills every command's group and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import sys
from collections.abc import Sequence
from typing import Any

from kiln.sandbox import linux, rootfs
from kiln.sandbox.view import Bind, SandboxConfig
from kiln.workers.protocol import ProtocolError, read_frame, write_frame


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.sandbox.server")
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--response-fd", type=int, required=True)
    parser.add_argument("--lifeline-fd", type=int, required=True)
    parser.add_argument("--config", required=True)
    options = parser.parse_args(argv)
    config = SandboxConfig.from_json(json.loads(options.config))
    responses = options.response_fd
    try:
        linux.enter_user_namespace()
        os.makedirs(config.staging, exist_ok=True)
    except OSError as error:
        write_frame(responses, {"error": error.strerror or str(error)})
        return 1
    write_frame(responses, {"ready": True})
    return _Server(config, options.request_fd, responses, options.lifeline_fd).serve()


class _Server:
    def __init__(self, config: SandboxConfig, requests: int, responses: int, lifeline: int):
        self.config = config
        self.requests = requests
        self.responses = responses
        self.lifeline = lifeline
        self.children: dict[int, tuple[int, int]] = {}  # pidfd -> (request id, pid)
        self.by_id: dict[int, int] = {}  # request id -> pid, while not reaped

    def serve(self) -> int:
        for fd in (self.requests, self.responses, self.lifeline):
            os.set_inheritable(fd, False)  # never into a command
        try:
            while True:
                poller = select.poll()
                for fd in (self.requests, self.lifeline, *self.children):
                    poller.register(fd, select.POLLIN)
                for fd, _ in poller.poll():
                    if fd == self.lifeline or (fd == self.requests and not self._request()):
                        return 0
                    if fd in self.children:
                        self._reap(fd)
        finally:
            for _, pid in self.children.values():
                _kill_group(pid)

    def _request(self) -> bool:
        """Serve one request; False at the end of the requests."""
        try:
            message = read_frame(self.requests)
        except ProtocolError as e:
            print(f"kiln sandbox server: bad request stream: {e}", file=sys.stderr)
            return False
        if message is None:
            return False
        if message.get("op") == "kill":
            pid = self.by_id.get(int(message["id"]))
            if pid is not None:
                _kill_group(pid)
        else:
            self._spawn(message)
        return True

    def _spawn(self, message: dict[str, Any]) -> None:
        ident = int(message["id"])
        errors_r, errors_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child ends in exec or _exit
            os.close(errors_r)
            _child(self.config, message, errors_w)
        os.close(errors_w)
        with os.fdopen(errors_r, "rb") as errors:
            failure = errors.read().decode(errors="replace")  # empty once it executed
        if failure:
            os.waitpid(pid, 0)
            write_frame(self.responses, {"id": ident, "error": failure})
            return
        self.by_id[ident] = pid
        self.children[os.pidfd_open(pid)] = (ident, pid)
        write_frame(self.responses, {"id": ident, "pid": pid})

    def _reap(self, pidfd: int) -> None:
        ident, pid = self.children.pop(pidfd)
        os.close(pidfd)
        _kill_group(pid)  # what the command left running goes with it, as it does locally
        _, status = os.waitpid(pid, 0)
        del self.by_id[ident]
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        write_frame(self.responses, {"id": ident, "status": code})


def _child(config: SandboxConfig, message: dict[str, Any], errors: int) -> None:
    """In the forked child: make the sandbox, enter it, execute the command."""
    argv = [str(a) for a in message["argv"]]
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        out = os.open(message["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(message["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open("/dev/null", os.O_RDONLY)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
        linux.unshare(linux.CLONE_NEWNS)
        root = config.staging
        rootfs.build_base(root, config)
        made = rootfs.Made()
        rootfs.private_tmp(root, config, "", made)
        rootfs.mount_binds(root, [Bind.from_json(b) for b in message["binds"]], "", made)
        rootfs.enter(root, str(message["cwd"]))
    except OSError as error:
        _fail(errors, f"cannot set up the sandbox: {error.strerror or error}")
    env = {str(k): str(v) for k, v in message["env"].items()}
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as error:
        _fail(errors, f"cannot run {argv[0]}: {error.strerror}")


def _fail(errors: int, text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(errors, text.encode())
    os._exit(127)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    raise SystemExit(main())
