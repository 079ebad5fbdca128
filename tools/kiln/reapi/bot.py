"""`kiln worker --reapi grpc://HOST:PORT`: a Remote Workers API bot that runs kiln's actions.

    CreateBotSession     the bot, its properties (--property KEY=VALUE) on its one
                         device, which is what the server routes by
    UpdateBotSession     in a loop: leases come in, the finished ones go back
    a lease              its payload is the Action (or its digest); the bot reads the
                         Action and its input root from the CAS, takes kiln's task
                         record (.kiln/task.pickle, reapi/encoding.py) and runs it
                         through kiln's node runner (remote_exec/node_runner.py): the
                         platform checked, inputs fetched and verified, the command in
                         a private execroot, sandboxed, outputs uploaded, then kiln's
                         entry under the action key; the lease's result is the REAPI
                         ActionResult

BuildGrid's facts (docs/remote-execution.md): leases arrive already ACTIVE;
UpdateBotSession long-polls for 80 % of its deadline while the bot holds
fewer leases than its capacity, so the bot asks with a long deadline only
while idle and reports a finished lease with a short one (a naive bot
reports up to 32 s late); a bot that dies keeps its lease until the server's
keepalive timeout, after which the server requeues it: nothing is stored
by a lease that did not finish, and kiln's outputs are content-addressed, so
a rerun stores nothing twice. So a busy bot says it is alive (its leases
ACTIVE) every HEARTBEAT_S: a bot silent while its action ran longer than the
keepalive was dropped, its lease requeued and handed to it again, and an
action that always outlasted the keepalive ran again for ever (seen on a
loaded machine: Bazel's AOTInductor compile, 20 s keepalive, five runs per
lease, then Bazel's retries, until the build timed out).

An action with no task record (one Bazel sent) runs as its Command says,
unsandboxed, as a farm's plain worker runs it (reapi/command_runner.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import pickle
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from buildgrid.common.protos.google.devtools.remoteworkers.v1test2 import (
    bots_pb2,
    bots_pb2_grpc,
    worker_pb2,
)
from buildgrid.common.protos.google.rpc import code_pb2

from kiln.cache.digest import Digest
from kiln.cache.reapi import encode_action_result
from kiln.reapi.encoding import TASK_PATH
from kiln.reapi.store import GrpcStore, describe, from_proto
from kiln.remote.options import RemoteOptions
from kiln.remote_exec.protocol import RemoteTask, TaskResult

_counter = itertools.count()
IDLE_DEADLINE_S = 30.0  # a long poll while there is nothing to report
BUSY_DEADLINE_S = 2.0  # a finished lease is reported at once
TICK_S = 0.5  # how often a busy bot checks whether its lease finished
# How often a busy bot reports its running leases: well inside BuildGrid's
# bot-session-keepalive-timeout (20 s in the tests, minutes in a farm) on a loaded machine.
HEARTBEAT_S = 5.0


@dataclass(frozen=True)
class BotOptions:
    address: str  # grpc(s)://HOST:PORT
    properties: tuple[tuple[str, str], ...]
    instance_name: str = ""
    name: str = ""  # bot_id; default host:pid


class Bot:
    def __init__(
        self,
        options: BotOptions,
        store: GrpcStore,
        remote: RemoteOptions,
        echo: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.echo = echo  # a line per lease taken and finished
        self.options = options
        self.store = store
        self.remote = remote  # what kiln's node runner opens its store from
        self.name = options.name or f"{socket.gethostname()}:{os.getpid()}"
        self.stub = bots_pb2_grpc.BotsStub(store.channel())
        self.stopping = threading.Event()
        self._running: dict[str, threading.Thread] = {}
        self._done: dict[str, bots_pb2.Lease] = {}
        self._lock = threading.Lock()
        self._call: grpc.Future | None = None

    def _session(self) -> bots_pb2.BotSession:
        worker = worker_pb2.Worker()
        device = worker.devices.add(handle=self.name)
        for key, value in self.options.properties:
            device.properties.add(key=key, value=value)
        return bots_pb2.BotSession(bot_id=self.name, status=bots_pb2.BotStatus.OK, worker=worker)

    def _create(self, metadata: Sequence[tuple[str, str]]) -> bots_pb2.BotSession:
        session: bots_pb2.BotSession = self.stub.CreateBotSession(
            bots_pb2.CreateBotSessionRequest(
                parent=self.options.instance_name, bot_session=self._session()
            ),
            timeout=self.store.timeout,
            metadata=metadata,
        )
        self._start(session)  # the server may hand out leases with the session itself
        return session

    def run(self) -> None:
        """Serve leases until stop(); raises grpc.RpcError only if the session cannot start."""
        metadata = self.store.spec.metadata
        session = self._create(metadata)
        heartbeat_at = time.monotonic() + HEARTBEAT_S
        while not self.stopping.is_set():
            with self._lock:
                busy = bool(self._running) or bool(self._done)
            if busy and not self._done:
                time.sleep(TICK_S)
                self._reap()
                with self._lock:
                    finished = bool(self._done)
                if not finished and time.monotonic() < heartbeat_at:
                    continue
            heartbeat_at = time.monotonic() + HEARTBEAT_S
            leases = self._leases(session)
            del session.leases[:]
            session.leases.extend(leases)
            deadline = BUSY_DEADLINE_S if busy else IDLE_DEADLINE_S
            call = self.stub.UpdateBotSession.future(
                bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session),
                timeout=deadline,
                metadata=metadata,
            )
            self._call = call  # stop() cancels the long poll
            try:
                if self.stopping.is_set():
                    call.cancel()
                session = call.result()
            except grpc.FutureCancelledError:
                break  # stop()
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    continue
                if self.stopping.is_set():
                    break
                if code in _SESSION_GONE:
                    # The server dropped this bot (past bot-session-keepalive-timeout on a
                    # loaded machine, or after a restart: "Bot does not exist while
                    # validating leases") and requeued its leases: a new session, or the
                    # bot would poll a dead one for ever and the build would wait on it.
                    with self._lock:
                        self._done.clear()
                    again = self._create_again(metadata)
                    if again is None:
                        break  # stop()
                    session = again
                    continue
                time.sleep(1.0)  # the server restarting: keep the session, try again
                continue
            with self._lock:
                for lease in leases:
                    if lease.state == bots_pb2.LeaseState.COMPLETED:
                        self._done.pop(lease.id, None)
            self._start(session)
        self._goodbye(session, metadata)

    def _goodbye(self, session: bots_pb2.BotSession, metadata: Sequence[tuple[str, str]]) -> None:
        """Tell the server this bot is going (BOT_TERMINATING): BuildGrid assigns jobs to
        OK bots only, and kept assigning them to a stopped bot until its keep-alive ran out
        (20-30 s per action in bench/bench_reapi.py, workers started per build)."""
        session.status = bots_pb2.BotStatus.BOT_TERMINATING
        with self._lock:
            finished = list(self._done.values())
        del session.leases[:]
        session.leases.extend(finished)
        with contextlib.suppress(grpc.RpcError):
            self.stub.UpdateBotSession(
                bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session),
                timeout=BUSY_DEADLINE_S,
                metadata=metadata,
            )

    def _create_again(self, metadata: Sequence[tuple[str, str]]) -> bots_pb2.BotSession | None:
        """A new session, asked for until the server answers (None after stop()): a bot
        that died here, while the server restarts, would leave the build waiting on no
        worker."""
        while not self.stopping.is_set():
            try:
                return self._create(metadata)
            except grpc.RpcError:
                self.stopping.wait(1.0)
        return None

    def _leases(self, session: bots_pb2.BotSession) -> list[bots_pb2.Lease]:
        """What the bot reports: its running leases ACTIVE, its finished ones COMPLETED."""
        with self._lock:
            reported = []
            for lease in session.leases:
                if lease.id in self._done:
                    continue
                if lease.id in self._running:
                    running = bots_pb2.Lease()
                    running.CopyFrom(lease)
                    running.state = bots_pb2.LeaseState.ACTIVE
                    reported.append(running)
            reported += self._done.values()
            return reported

    def _start(self, session: bots_pb2.BotSession) -> None:
        for lease in session.leases:
            if lease.state not in (bots_pb2.LeaseState.PENDING, bots_pb2.LeaseState.ACTIVE):
                continue
            with self._lock:
                if lease.id in self._running or lease.id in self._done:
                    continue
                copy = bots_pb2.Lease()
                copy.CopyFrom(lease)
                thread = threading.Thread(target=self._work, args=(copy,), daemon=True)
                self._running[lease.id] = thread
            self.echo(f"INFO: lease {lease.id}: started")
            thread.start()

    def _reap(self) -> None:
        with self._lock:
            for lease_id, thread in list(self._running.items()):
                if not thread.is_alive():
                    self._running.pop(lease_id)

    def _work(self, lease: bots_pb2.Lease) -> None:
        try:
            result, status = self.run_lease(lease)
        except Exception as e:  # the lease fails, the bot goes on
            result, status = None, (code_pb2.INTERNAL, f"kiln worker {self.name}: {e}")
        done = bots_pb2.Lease()
        done.CopyFrom(lease)
        done.state = bots_pb2.LeaseState.COMPLETED
        done.status.code, done.status.message = status
        if result is not None:
            done.result.Pack(result)
        with self._lock:
            self._done[lease.id] = done
            self._running.pop(lease.id, None)
        code = "exit code " + str(result.exit_code) if result is not None else status[1]
        self.echo(f"INFO: lease {lease.id}: finished ({code})")

    def run_lease(
        self, lease: bots_pb2.Lease
    ) -> tuple[re_pb2.ActionResult | None, tuple[int, str]]:
        action = re_pb2.Action()
        if not lease.payload.Unpack(action):
            digest = re_pb2.Digest()
            if not lease.payload.Unpack(digest):
                return None, (code_pb2.INVALID_ARGUMENT, "the lease carries no Action")
            action.ParseFromString(self.store.read_bytes(from_proto(digest)))
        task_digest = self._find(from_proto(action.input_root_digest), TASK_PATH)
        if task_digest is None:  # not kiln's (Bazel's): run the Command as it says
            from kiln.reapi.command_runner import run_command
            from kiln.remote_exec.node_runner import worker_root

            folder = worker_root() / "reapi" / f"{os.getpid()}-{next(_counter)}"
            return run_command(self.store, action, folder, None), (code_pb2.OK, "")
        task = pickle.loads(self.store.read_bytes(task_digest))
        if not isinstance(task, RemoteTask):
            return None, (code_pb2.INVALID_ARGUMENT, f"{TASK_PATH} is no kiln task")
        from kiln.remote_exec.node_runner import run_task

        ended = run_task(dataclasses.replace(task, remote=self.remote))
        return _reapi_result(ended, self.name), (code_pb2.OK, "")

    def _find(self, root: Digest, path: str) -> Digest | None:
        """The digest of the file at `path` in the input root; None if it has none."""
        *folders, name = path.split("/")
        directory = re_pb2.Directory.FromString(self.store.read_bytes(root))
        for folder in folders:
            child = next((d for d in directory.directories if d.name == folder), None)
            if child is None:
                return None
            directory = re_pb2.Directory.FromString(self.store.read_bytes(from_proto(child.digest)))
        found = next((f for f in directory.files if f.name == name), None)
        return None if found is None else from_proto(found.digest)

    def stop(self) -> None:
        self.stopping.set()
        call = self._call
        if call is not None:
            call.cancel()


# What UpdateBotSession answers when the server no longer knows the bot's session.
_SESSION_GONE = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)


def _reapi_result(ended: TaskResult, worker: str) -> re_pb2.ActionResult:
    if ended.result is not None:
        message = re_pb2.ActionResult.FromString(encode_action_result(ended.result))
        message.stdout_raw = ended.printed.encode()
    else:
        message = re_pb2.ActionResult(exit_code=ended.exit_code or 1)
        message.stderr_raw = (ended.output or ended.message).encode()
    message.execution_metadata.worker = f"{worker} ({ended.node})"
    return message


def parse_properties(texts: Sequence[str]) -> tuple[tuple[str, str], ...]:
    from kiln.reapi.properties import parse_property

    return tuple(parse_property(text) for text in texts)


__all__ = ["Bot", "BotOptions", "describe", "parse_properties"]
