"""The REAPI bot's session with the server (kiln.reapi.bot.Bot)."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from buildgrid.common.protos.google.devtools.remoteworkers.v1test2 import bots_pb2
from kiln.reapi import bot as bot_module
from kiln.reapi.bot import Bot, BotOptions
from kiln.reapi.channel import ChannelSpec
from kiln.reapi.store import GrpcStore
from kiln.remote.options import RemoteOptions


class _Gone(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INVALID_ARGUMENT

    def details(self) -> str:
        return "Bot does not exist while validating leases."

    def initial_metadata(self) -> None: ...
    def trailing_metadata(self) -> None: ...
    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None: ...
    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: object) -> bool:
        return False


class _Answer:
    def __init__(self, result: Any) -> None:
        self._result = result

    def result(self) -> Any:
        if isinstance(self._result, Exception):
            raise self._result
        return self._result

    def cancel(self) -> bool:
        return True


class _Server:
    """BotsStub as BuildGrid answers once it dropped a bot that missed its keep-alive."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot
        self.created: list[str] = []
        self.updated: list[str] = []
        self.goodbyes: list[tuple[str, int]] = []

    def CreateBotSession(self, request: Any, **_: Any) -> bots_pb2.BotSession:
        name = f"session-{len(self.created)}"
        self.created.append(name)
        session = bots_pb2.BotSession()
        session.CopyFrom(request.bot_session)
        session.name = name
        return session

    @property
    def UpdateBotSession(self) -> _Server:
        return self

    def __call__(self, request: Any, **_: Any) -> bots_pb2.BotSession:
        """The bot's last, blocking UpdateBotSession as it stops."""
        self.goodbyes.append((request.name, request.bot_session.status))
        return request.bot_session

    def future(self, request: Any, **_: Any) -> _Answer:
        self.updated.append(request.name)
        if request.name == "session-0":
            return _Answer(_Gone())
        self.bot.stopping.set()  # the new session answered: enough
        return _Answer(request.bot_session)


def test_a_bot_the_server_dropped_opens_a_new_session_instead_of_polling_the_dead_one() -> None:
    """Seen in CI under load: BuildGrid answered every UpdateBotSession with "Bot does not
    exist", the bot kept polling its old session for 14 minutes, and the build waited."""
    store = GrpcStore(ChannelSpec.parse("grpc://127.0.0.1:1"), timeout=5)
    bot = Bot(BotOptions("grpc://127.0.0.1:1", ()), store, RemoteOptions())
    server = _Server(bot)
    bot.stub = server  # type: ignore[assignment]
    bot.run()
    assert server.created == ["session-0", "session-1"]
    assert server.updated == ["session-0", "session-1"]
    # Stopped, it says so: BuildGrid assigns jobs only to bots whose status is OK.
    assert server.goodbyes == [("session-1", bots_pb2.BotStatus.BOT_TERMINATING)]


class _Down(_Gone):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "failed to connect to all addresses"


class _Restarting(_Server):
    """The server dropped the bot and is still coming back when the bot asks anew."""

    def __init__(self, bot: Bot) -> None:
        super().__init__(bot)
        self.refused = 0

    def CreateBotSession(self, request: Any, **kwargs: Any) -> bots_pb2.BotSession:
        if self.created and self.refused < 2:
            self.refused += 1
            raise _Down()
        return super().CreateBotSession(request, **kwargs)


def test_a_bot_whose_new_session_is_refused_while_the_server_restarts_asks_again() -> None:
    """A bot that died on that refusal would leave the build waiting on no worker."""
    store = GrpcStore(ChannelSpec.parse("grpc://127.0.0.1:1"), timeout=5)
    bot = Bot(BotOptions("grpc://127.0.0.1:1", ()), store, RemoteOptions())
    server = _Restarting(bot)
    bot.stub = server  # type: ignore[assignment]
    bot.run()
    assert server.refused == 2
    assert server.created == ["session-0", "session-1"]
    assert server.updated == ["session-0", "session-1"]


class _Leasing(_Server):
    """A server that hands the bot one lease with its session and records every report."""

    def __init__(self, bot: Bot) -> None:
        super().__init__(bot)
        self.reports: list[list[int]] = []  # the lease states of each UpdateBotSession

    def CreateBotSession(self, request: Any, **kwargs: Any) -> bots_pb2.BotSession:
        session = super().CreateBotSession(request, **kwargs)
        session.leases.add(id="lease-1", state=bots_pb2.LeaseState.ACTIVE)
        return session

    def future(self, request: Any, **_: Any) -> _Answer:
        states = [lease.state for lease in request.bot_session.leases]
        self.reports.append(states)
        if bots_pb2.LeaseState.COMPLETED in states:
            self.bot.stopping.set()
        return _Answer(request.bot_session)


def test_a_busy_bot_reports_its_running_lease_until_it_finishes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BuildGrid drops a bot silent for its keep-alive and requeues the lease: a bot that
    said nothing while a long action ran got the same lease again on finishing, and ran it
    again (five times per lease, then Bazel's retries) until the build timed out."""
    monkeypatch.setattr(bot_module, "HEARTBEAT_S", 0.05, raising=False)
    monkeypatch.setattr(bot_module, "TICK_S", 0.01)
    store = GrpcStore(ChannelSpec.parse("grpc://127.0.0.1:1"), timeout=5)
    bot = Bot(BotOptions("grpc://127.0.0.1:1", ()), store, RemoteOptions())
    server = _Leasing(bot)
    bot.stub = server  # type: ignore[assignment]

    def long_action(lease: bots_pb2.Lease) -> tuple[None, tuple[int, str]]:
        deadline = time.monotonic() + 5
        while len(server.reports) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # the action runs until the bot has said so three times
        return None, (0, "")

    monkeypatch.setattr(bot, "run_lease", long_action)
    bot.run()
    active, completed = bots_pb2.LeaseState.ACTIVE, bots_pb2.LeaseState.COMPLETED
    assert server.reports[:3] == [[active]] * 3
    assert server.reports[-1] == [completed]
