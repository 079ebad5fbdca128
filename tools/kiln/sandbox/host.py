"""A persistent worker's sandbox: `python -m kiln.sandbox.host --request-fd R
--response-fd W --lifeline-fd L --config JSON -- python -m kiln.workers.main
--request-fd R --response-fd W ...`.

A worker keeps torch imported between actions, and a process with threads
can enter no other mount namespace (the kernel refuses unshare and setns of
one to it). So the worker lives in one sandbox whose view is rebound for each
action, and this host makes the rebinding, from outside the worker:

    host:    enters a user and mount namespace, builds the root (rootfs.build_base),
             makes it the root while keeping the host's reachable through one
             descriptor only it holds (rootfs.enter_keeping_host), and forks the
             worker, which execs with its request descriptor R on a pipe from the host.
    request: the pool's frame (kiln.workers.protocol) may carry "sandbox": the
             action's binds. The host undoes the previous action's mounts, makes this
             one's (a fresh /tmp, the execroot, the inputs read-only: rootfs.rebind)
             and forwards the frame without that key; the worker answers the pool
             directly on its response descriptor. An action's view is made only
             while the worker is idle: the pool sends one request at a time.

The worker and what its actions start stay in the host's process group, which
the pool kills on a timeout. At the end of the pool's requests the host closes
the worker's; when the worker ends, or the lifeline does (kiln is gone), the
host kills its group and exits, so nothing of it outlives kiln. If the
namespace cannot be made, the host exits 3 at once, before any frame: the pool
reports that the worker failed to start.
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

from kiln.sandbox import linux, rootfs
from kiln.sandbox.view import Bind, SandboxConfig
from kiln.workers.protocol import ProtocolError, read_frame, write_frame

_HIDDEN = "/.kiln-host"  # where the host's root sits, covered, in the worker's view


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    split = args.index("--")
    parser = argparse.ArgumentParser(prog="python -m kiln.sandbox.host")
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--response-fd", type=int, required=True)
    parser.add_argument("--lifeline-fd", type=int, required=True)
    parser.add_argument("--config", required=True)
    options = parser.parse_args(args[:split])
    worker = args[split + 1 :]
    config = SandboxConfig.from_json(json.loads(options.config))
    requests = options.request_fd
    try:
        linux.enter_user_namespace()
        os.makedirs(config.staging, exist_ok=True)
        rootfs.build_base(config.staging, config)
        host = rootfs.enter_keeping_host(config.staging, _HIDDEN)
        made = rootfs.rebind(config, rootfs.Made(), [], host)  # a /tmp before the first action
    except OSError as error:
        print(f"kiln sandbox: {error.strerror or error}", file=sys.stderr)
        return 3
    to_worker_r, to_worker = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the worker: it ends in exec
        os.close(to_worker)
        os.close(host)
        os.dup2(to_worker_r, requests)  # the descriptor its command line names
        os.close(to_worker_r)
        try:
            os.execv(worker[0], worker)
        except OSError as error:
            print(f"kiln sandbox: cannot run {worker[0]}: {error.strerror}", file=sys.stderr)
            os._exit(127)
    os.close(to_worker_r)
    os.close(options.response_fd)  # the worker's alone: its end of file is the worker's death
    os.set_inheritable(requests, False)
    return _serve(config, requests, to_worker, options.lifeline_fd, host, pid, made)


def _serve(
    config: SandboxConfig,
    requests: int,
    to_worker: int,
    lifeline: int,
    host: int,
    worker: int,
    made: rootfs.Made,
) -> int:
    pidfd = os.pidfd_open(worker)
    try:
        while True:
            ready = {fd for fd, _ in _poll(requests, lifeline, pidfd)}
            if lifeline in ready or pidfd in ready:
                return 0
            try:
                message = read_frame(requests)
            except ProtocolError as e:
                print(f"kiln sandbox: bad request stream: {e}", file=sys.stderr)
                return 2
            if message is None:  # the pool is done: so is the worker
                os.close(to_worker)
                os.waitpid(worker, 0)
                return 0
            binds = [Bind.from_json(b) for b in message.pop("sandbox", None) or ()]
            try:
                made = rootfs.rebind(config, made, binds, host)
            except OSError as error:
                # The worker cannot run it here: it gets a request that fails to start.
                message["cwd"] = f"/nonexistent (the sandbox failed: {error.strerror or error})"
            write_frame(to_worker, message)
    finally:
        if os.getpgrp() == os.getpid():  # the pool made the host its group's leader
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgrp(), signal.SIGKILL)  # the worker, what its action started


def _poll(*fds: int) -> list[tuple[int, int]]:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return poller.poll()


if __name__ == "__main__":
    raise SystemExit(main())
