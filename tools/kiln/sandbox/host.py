"""A sandbox host: one long-lived sandbox whose view it remakes for each action.

    python -m kiln.sandbox.host --request-fd R --response-fd W --lifeline-fd L --config JSON
        runs commands, one at a time (client.py keeps one host per command running at once)
    ... --detach 1
        the same, forked away from its starter first (on a Ray node: a forced cancel
        kills the Ray worker's children, and a host must live to kill its command)
    ... -- python -m kiln.workers.main --request-fd R --response-fd W ...
        runs a persistent worker, and remakes its view before each of its requests

At start the host becomes root of a user namespace with a mount namespace of
its own, builds the root (rootfs.build_base) and makes it its root, keeping
the host's file system reachable through one descriptor only it holds
(rootfs.enter_keeping_host). Then, for each action, while nothing runs in the
sandbox, it undoes the previous action's part and makes this one's: a fresh
/tmp, the execroot, the inputs read-only (rootfs.rebind).

Why not a fresh namespace per action: forking a Python process costs over a
millisecond on the build machines, and a process with threads (a worker,
torch imported) can enter no other mount namespace at all. A view remade in
place costs a few mounts, and a command starts with posix_spawn (vfork).

Commands, on the host's own pipes (frames of kiln.workers.protocol):

    host -> kiln, once:   {"ready": true, "pid": 1234}
                          or  {"error": "unshare: Operation not permitted"}
    kiln -> host:         {"op": "spawn", "id": 7, "argv": [...], "env": {...}, "cwd": "...",
                           "stdout": "...", "stderr": "...", "binds": [[src, dst, rw], ...]}
                          {"op": "kill", "id": 7}
    host -> kiln:         {"id": 7, "pid": 1234}               started, in a session of its own
                          {"id": 7, "status": 0}                ended (-N: killed by signal N)
                          {"id": 7, "error": "cannot run x: ..."}   never started

A command runs in a session of its own; when it ends, what it left running
is killed: its process group, as a kill request kills it, and what left the group
(`setsid`), which the host, a child subreaper, finds below itself (kiln.process_tree). A worker:
the pool's request frames pass through the host, which takes out their
"sandbox" key (the action's binds) and forwards them on a pipe of its own;
the worker answers the pool directly. The worker and what its actions start
stay in the host's process group, which the pool kills on a timeout. At the
end of its requests, or of the lifeline (kiln is gone, kill -9 included), a
host kills what runs and exits, so nothing of it outlives kiln.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import shutil
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kiln import process_tree
from kiln.sandbox import linux, rootfs
from kiln.sandbox.view import Bind, SandboxConfig
from kiln.workers.protocol import ProtocolError, read_frame, write_frame

_HIDDEN = "/.kiln-host"  # where the host's root sits, covered, in the sandbox's view
# Python ignores SIGPIPE; a command gets the defaults a shell's child gets.
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


@dataclass(frozen=True)
class _Options:
    request_fd: int
    response_fd: int
    lifeline_fd: int
    config: str
    detach: bool  # fork away from the starting process first (client.Sandbox's `detached`)


def _parse(args: Sequence[str]) -> _Options:
    """The host's own options, which client.py writes: `--name value` each, the four fds
    and the config always, `--detach 1` for a detached host.
    Not argparse: its import is a fifth of the host's start, paid by every build that
    runs an action."""
    values = dict(zip(args[::2], args[1::2], strict=True))
    return _Options(
        int(values["--request-fd"]),
        int(values["--response-fd"]),
        int(values["--lifeline-fd"]),
        values["--config"],
        values.get("--detach") == "1",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    split = args.index("--") if "--" in args else len(args)
    options = _parse(args[:split])
    worker = args[split + 1 :]
    config = SandboxConfig.from_json(json.loads(options.config))
    if options.detach and os.fork():
        os._exit(0)  # the launcher: the host is now nobody's child, out of its killer's reach
    # What a command leaves running, in a session of its own too, becomes the host's
    # child once the command ends, and is killed with it (kiln.process_tree). After the
    # detaching fork: a child does not inherit the subreaper mark.
    process_tree.become_subreaper()
    try:
        linux.enter_user_namespace()
        os.makedirs(config.staging, exist_ok=True)
        rootfs.build_base(config.staging, config)
        host = rootfs.enter_keeping_host(config.staging, _HIDDEN)
        made = rootfs.rebind(config, rootfs.Made(), [], host)  # a /tmp before the first action
    except OSError as error:
        reason = error.strerror or str(error)
        if worker:
            print(f"kiln sandbox: {reason}", file=sys.stderr)
        else:
            write_frame(options.response_fd, {"error": reason})
        return 3
    view = _View(config, host, made)
    if worker:
        return _serve_worker(view, options, worker)
    for fd in (options.request_fd, options.response_fd, options.lifeline_fd):
        os.set_inheritable(fd, False)  # never into a command
    write_frame(options.response_fd, {"ready": True, "pid": os.getpid()})
    return _Commands(view, options.request_fd, options.response_fd, options.lifeline_fd).serve()


class _View:
    """The sandbox's root as this host keeps it, and the current action's part."""

    def __init__(self, config: SandboxConfig, host: int, made: rootfs.Made) -> None:
        self.config = config
        self.host = host
        self.made = made

    def remake(self, binds: Sequence[Bind]) -> None:
        self.made = rootfs.rebind(self.config, self.made, binds, self.host)


class _Commands:
    def __init__(self, view: _View, requests: int, responses: int, lifeline: int) -> None:
        self.view = view
        self.requests = requests
        self.responses = responses
        self.lifeline = lifeline
        self.running: tuple[int, int, int] | None = None  # (request id, pid, pidfd)

    def serve(self) -> int:
        try:
            while True:
                fds = [self.requests, self.lifeline]
                if self.running is not None:
                    fds.append(self.running[2])
                for fd in {fd for fd, _ in _poll(*fds)}:
                    if fd == self.lifeline:
                        return 0
                    if fd == self.requests and not self._request():
                        return 0
                    if self.running is not None and fd == self.running[2]:
                        self._reap()
        finally:
            if self.running is not None:
                _kill_group(self.running[1])
            process_tree.kill_descendants()

    def _request(self) -> bool:
        try:
            message = read_frame(self.requests)
        except ProtocolError as e:
            print(f"kiln sandbox: bad request stream: {e}", file=sys.stderr)
            return False
        if message is None:
            return False
        ident = int(message["id"])
        if message.get("op") == "kill":
            if self.running is not None and self.running[0] == ident:
                _kill_group(self.running[1])
            return True
        if self.running is not None:  # the client sends one command at a time
            write_frame(self.responses, {"id": ident, "error": "the sandbox is busy"})
            return True
        try:
            pid = self._spawn(message)
        except OSError as error:
            write_frame(self.responses, {"id": ident, "error": str(error)})
            return True
        self.running = (ident, pid, os.pidfd_open(pid))
        write_frame(self.responses, {"id": ident, "pid": pid})
        return True

    def _spawn(self, message: dict[str, Any]) -> int:
        argv = [str(a) for a in message["argv"]]
        env = {str(k): str(v) for k, v in message["env"].items()}
        try:
            self.view.remake([Bind.from_json(b) for b in message["binds"]])
        except OSError as error:
            raise OSError(f"cannot set up the sandbox: {error.strerror or error}") from None
        program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", ""))
        if program is None:
            raise OSError(f"cannot run {argv[0]}: No such file or directory")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        opened: list[int] = []
        try:
            opened.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
            opened.append(os.open(message["stdout"], flags, 0o644))
            opened.append(os.open(message["stderr"], flags, 0o644))
            os.chdir(message["cwd"])  # posix_spawn has no cwd of its own: the child takes ours
            return os.posix_spawn(
                program,
                argv,
                env,
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(opened)],
                setsid=True,
                setsigdef=_DEFAULT_SIGNALS,
                setsigmask=(),
            )
        except OSError as error:
            raise OSError(f"cannot run {argv[0]}: {error.strerror}") from None
        finally:
            os.chdir("/")
            for fd in opened:
                os.close(fd)

    def _reap(self) -> None:
        assert self.running is not None
        ident, pid, pidfd = self.running
        self.running = None
        os.close(pidfd)
        _kill_group(pid)  # what the command left running goes with it
        _, status = os.waitpid(pid, 0)
        process_tree.kill_descendants()  # and what left its group (setsid): issue 20
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        write_frame(self.responses, {"id": ident, "status": code})


def _serve_worker(view: _View, options: _Options, worker: list[str]) -> int:
    requests = options.request_fd
    to_worker_r, to_worker = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the worker: it ends in exec
        os.close(to_worker)
        os.close(view.host)
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
    pidfd = os.pidfd_open(pid)
    worker_status: int | None = None
    try:
        while True:
            ready = {fd for fd, _ in _poll(requests, options.lifeline_fd, pidfd)}
            if pidfd in ready:  # the worker died: the host ends as it did (below)
                _, worker_status = os.waitpid(pid, 0)
                return os.waitstatus_to_exitcode(worker_status)
            if options.lifeline_fd in ready:
                return 0
            try:
                message = read_frame(requests)
            except ProtocolError as e:
                print(f"kiln sandbox: bad request stream: {e}", file=sys.stderr)
                return 2
            if message is None:  # the pool is done: so is the worker
                os.close(to_worker)
                os.waitpid(pid, 0)
                return 0
            try:
                view.remake([Bind.from_json(b) for b in message.pop("sandbox", None) or ()])
            except OSError as error:
                # The worker cannot run it here: it gets a request that fails to start.
                message["cwd"] = f"/nonexistent (the sandbox failed: {error.strerror or error})"
            write_frame(to_worker, message)
    finally:
        if os.getpgrp() == os.getpid():  # the pool made the host its group's leader
            _kill_group_but_this_process()  # the worker, what its action started
        process_tree.kill_descendants()  # what left the group (a worker killed mid-action)
        if worker_status is not None and os.WIFSIGNALED(worker_status):
            # The pool reports how the host ended as how the worker did: a worker's
            # SIGSEGV was reported as the SIGKILL the host gave its group (issue 20).
            _die_by(os.WTERMSIG(worker_status))


def _poll(*fds: int) -> list[tuple[int, int]]:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return poller.poll()


def _kill_group_but_this_process() -> None:
    """SIGKILL every other process of this process's group (killpg would kill this one
    too, before it could say how its worker ended)."""
    me, group = os.getpid(), os.getpgrp()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == group:  # after the name: state, ppid, pgrp
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(name), signal.SIGKILL)


def _die_by(number: int) -> None:
    """End this process by signal `number`, as its worker ended, without a core dump."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(OSError, ValueError):
        signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
    os.kill(os.getpid(), number)
    os.kill(os.getpid(), signal.SIGKILL)  # a signal whose default is not to end


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # Not Python's finalization: it took 30-60 ms of the build's end (waiting for the host).
    # Frames are written with os.write: nothing is left in a buffer.
    os._exit(code)
