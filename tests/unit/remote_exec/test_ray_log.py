"""Ray's client logs what it sees of a lost head ("Unrecoverable error in data channel.")
through the handler `import ray` gives the "ray" logger, onto the user's terminal, before
kiln's own line about it. While kiln holds a connection those lines are kept instead, as
details of kiln's error (--verbose_failures)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import grpc
import pytest
import ray
from kiln.remote_exec.address import RayAddress
from kiln.remote_exec.cluster import Cluster, ClusterUnreachable
from kiln.remote_exec.ray_log import keep_ray_lines

DATA_CHANNEL = logging.getLogger("ray.util.client.dataclient")


def test_rays_errors_reach_no_terminal_but_are_kept(capfd: pytest.CaptureFixture[str]) -> None:
    import ray.util.client.logsclient  # noqa: F401  (ray.init imports it: a logger apart)

    kept = keep_ray_lines()
    DATA_CHANNEL.error("Unrecoverable error in data channel.")
    logging.getLogger("ray.util.client.logsclient").warning("Log channel is reconnecting.")
    logging.getLogger("ray.util.client.worker").info("Connected to Ray cluster.")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    text = kept.text()
    assert text is not None
    assert "Unrecoverable error in data channel." in text
    assert "Log channel is reconnecting." in text
    assert "Connected to Ray cluster." not in text  # INFO is chatter, not kept


def test_keeping_twice_is_one_handler() -> None:
    assert keep_ray_lines() is keep_ray_lines()
    assert logging.getLogger("ray").handlers == [keep_ray_lines()]


def test_an_exception_ending_one_of_grpcs_threads_is_kept_not_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed: list[threading.ExceptHookArgs] = []  # what Python's own hook would print
    monkeypatch.setattr(threading, "excepthook", printed.append)
    kept = keep_ray_lines()
    # Ray's client closes its channel with a connectivity subscription still live; gRPC's
    # polling thread then raises on the closed channel. A subscription that asked to
    # connect makes that certain here (in Ray it is a race).
    channel = grpc.insecure_channel("127.0.0.1:1")
    channel.subscribe(lambda _: None)
    channel.subscribe(lambda _: None, try_to_connect=True)
    channel.close()
    deadline = time.monotonic() + 30
    while "Channel closed!" not in (kept.text() or "") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "Channel closed!" in (kept.text() or "")
    assert printed == []


def test_an_exception_ending_anyone_elses_thread_is_still_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", printed.append)
    keep_ray_lines()
    hook = threading.excepthook
    keep_ray_lines()
    assert threading.excepthook is hook  # wrapped once, however often kiln keeps the lines

    def fails() -> None:
        raise RuntimeError("a thread of kiln's own")

    def fails_inside_grpc() -> None:  # kiln's thread still, though gRPC raised
        channel = grpc.insecure_channel("127.0.0.1:1")
        channel.close()
        channel.unary_unary("/a.Service/Method")(b"")

    for target in (fails, fails_inside_grpc):
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
    assert [type(args.exc_value).__name__ for args in printed] == ["RuntimeError", "ValueError"]
    assert "a thread of kiln's own" not in (keep_ray_lines().text() or "")


class _Unavailable(grpc.RpcError):
    def __str__(self) -> str:
        return "<_MultiThreadedRendezvous: UNAVAILABLE: Socket closed>"


def test_a_lost_cluster_is_one_line_with_rays_lines_as_details(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster(RayAddress.parse("ray://127.0.0.1:10001"))
    monkeypatch.setattr(cluster, "connect", lambda: None)
    cluster._ray_lines = keep_ray_lines()

    def wait(*args: Any, **kwargs: Any) -> Any:
        DATA_CHANNEL.error("Unrecoverable error in data channel.")
        raise _Unavailable()

    monkeypatch.setattr(ray, "wait", wait)
    with pytest.raises(ClusterUnreachable) as raised:
        cluster.result(object(), 1.0)  # type: ignore[arg-type]
    error = raised.value
    assert error.format() == (
        "lost the Ray cluster at ray://127.0.0.1:10001: "
        "<_MultiThreadedRendezvous: UNAVAILABLE: Socket closed>"
    )
    verbose = error.format(verbose=True)
    assert verbose.startswith(error.format() + "\nRay's client logged:\n")
    assert "Unrecoverable error in data channel." in verbose
