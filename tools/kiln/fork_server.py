"""Child processes forked from a worker's pristine state: torch imported, nothing run yet.

    server = ForkServer.start()      # in the worker, after preloading, before any action
    ...
    server = fork_server.current()   # in an action: the worker's, or None (a plain process)
    status = server.run("kiln.actions.validate", ["--checks", ...], env, cwd, (0, out, err))

An action that must run part of its work in a child of its own (AotiValidate: a
package that aborts must kill a child, never the worker) would pay `import torch`
again in a fresh `python -m` (1.5 s). Forking the worker itself is no substitute:
once torch has computed anything its OpenMP threads exist, and a child forked then
hangs in its first parallel region. So a worker forks this server right after
preloading, while it has run nothing; the server forks each child from that state
(about 10 ms) and waits for it.

A child is run as `python -m module argv` would be: in `cwd`, with `env` as its
environment (os.environ, so C code sees it too), the given descriptors as its stdin,
stdout and stderr, sys.path led by `cwd` (unless PYTHONSAFEPATH) and the
PYTHONPATH entries; SystemExit is its exit status, an uncaught exception is
printed and exits 1; a signal is `-N`, as subprocess reports it. What differs
from a fresh interpreter: settings read at start-up (PYTHONHASHSEED, the locale,
torch's thread pools) are the worker's, and the preloaded modules are already
imported. The server and its children stay in the worker's process group (what
kills the worker's group kills them) and die with their parent (PR_SET_PDEATHSIG).
One child at a time: a worker runs one action at a time.

A leaf: the worker (kiln.workers.main) starts the server, actions use it, and
neither layer may import the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import runpy
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

# A request (module, argv, env, cwd) as one datagram; environments are a few kB.
_MAX_MESSAGE = 1 << 20
_PR_SET_PDEATHSIG = 1


def current() -> ForkServer | None:
    """The fork server of the worker this runs in (None in a plain process)."""
    return ForkServer.started


class ForkServer:
    """The worker's end of a fork server process."""

    started: ClassVar[ForkServer | None] = None  # this process's, once start() made it

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self._sock = sock

    @classmethod
    def start(cls) -> ForkServer | None:
        """Fork the server from this process as it is now; None where that cannot be
        (no fork or no SOCK_SEQPACKET: then actions start children the usual way)."""
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except (AttributeError, OSError):
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        worker = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the server; it ends in os._exit
            ours.close()
            _serve(theirs, worker)
        theirs.close()
        ForkServer.started = cls(pid, ours)
        return ForkServer.started

    def run(
        self,
        module: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        stdio: tuple[int, int, int],
    ) -> int:
        """Run `python -m module argv` in a child forked from the server; its exit status
        (-N: killed by signal N)."""
        request = json.dumps(
            {"module": module, "argv": list(argv), "env": dict(env), "cwd": cwd}
        ).encode()
        socket.send_fds(self._sock, [request], list(stdio))
        reply = self._sock.recv(_MAX_MESSAGE)
        if not reply:
            raise OSError("the fork server ended while its child ran")
        return int(json.loads(reply)["exit_code"])


def _serve(sock: socket.socket, worker: int) -> None:  # pragma: no cover - the server
    """Fork a child per request and answer with its exit status; exit at end of file."""
    code = 0
    try:
        _die_with_parent(worker)
        # Nothing of the worker's protocol stays open here (its lifeline's end is the
        # worker's business; this process ends with the worker anyway).
        os.closerange(3, sock.fileno())
        os.closerange(sock.fileno() + 1, _max_fd())
        while True:
            message, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 3)
            if not message:
                break
            server = os.getpid()
            pid = os.fork()
            if pid == 0:
                sock.close()
                _child(json.loads(message), fds, server)
            for fd in fds:
                os.close(fd)
            _, status = os.waitpid(pid, 0)
            sock.send(json.dumps({"exit_code": os.waitstatus_to_exitcode(status)}).encode())
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


def _child(request: dict[str, Any], fds: list[int], server: int) -> None:  # pragma: no cover
    """Become `python -m module argv` as the request says; never returns."""
    code = 1
    try:
        _die_with_parent(server)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        env: dict[str, str] = request["env"]
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # cached from the worker's $TMPDIR
        extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = [*([] if env.get("PYTHONSAFEPATH") else [os.getcwd()]), *extra]
        sys.argv = ["-m", *request["argv"]]
        code = _run_module(request["module"])
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _run_module(module: str) -> int:  # pragma: no cover - runs in a child
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code & 0xFF
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the parent ends (Linux: strictly, when the thread that forked this ends,
    which is the worker's main thread or the server's only one)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the signal was asked for
        os._exit(1)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        return 1024
