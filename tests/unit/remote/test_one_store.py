"""A build opens its remote store once: the remote-cache gate and the spawner share it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kiln.cache import remote

from tests.kiln_workspace import MakeWorkspace
from tests.nginx_cache import NginxCache


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxCache]:
    server = NginxCache.start(tmp_path_factory.mktemp("nginx"))
    try:
        yield server
    finally:
        server.stop()


def test_a_build_with_a_remote_cache_and_executor_opens_one_store(
    make_workspace: MakeWorkspace, nginx: NginxCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[remote.RemoteCache] = []
    real = remote.RemoteCache.__init__

    def counting(self: remote.RemoteCache, *args: Any, **kwargs: Any) -> None:
        opened.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(remote.RemoteCache, "__init__", counting)
    ws = make_workspace({"BUILD": 'genrule(name = "a", outs = ["a.txt"], cmd = "echo a > $@")'})
    run = ws.kiln(
        "build",
        "//:a",
        f"--remote_cache={nginx.url}",
        "--remote_instance_name=one-store",
        # never connected: no action is placed there, but its spawner is made
        "--remote_executor=ray://127.0.0.1:1",
        "--strategy=local",
    )
    assert run.code == 0, run.err
    assert len(opened) == 1
    assert list((nginx.root / "one-store" / "ac").iterdir())  # and it was used: uploaded
