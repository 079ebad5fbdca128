"""The RemoteExecutor (kiln.remote.executor) of `--remote_executor=grpc(s)://HOST:PORT`.

The Execution service's server is reached with the same flags as the
store's (instance name, headers, TLS). Inputs and outputs travel through
--remote_cache, which is usually the same server. GPU toolchains resolve on
this machine: a REAPI server cannot run a probe on a chosen worker, so a
GPU-less driver's GPU actions carry what it knows (`device = "cuda"`, the
properties it was given) and the farm's GPU pool is picked by them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from kiln.cache.cas import ContentStore
from kiln.cache.remote_store import RemoteError, RemoteStore
from kiln.errors import KilnError
from kiln.host_facts import HostFacts, Toolchain
from kiln.reapi.spawner import ReapiSpawner
from kiln.reapi.store import GrpcStore
from kiln.remote.executor import ExecutorUnreachable
from kiln.remote.options import RemoteOptions

if TYPE_CHECKING:
    pass

T = TypeVar("T")


class _HerePlatform:
    def __init__(self, local: HostFacts) -> None:
        self.local = local

    def resolve(self, toolchain: Toolchain[T]) -> T:
        return toolchain.resolve(self.local)


class ReapiExecutor:
    def __init__(self, server: GrpcStore, options: RemoteOptions, store: RemoteStore | None):
        self.server = server
        self.options = options
        self.store = store

    @staticmethod
    def open(options: RemoteOptions, store: RemoteStore | None) -> ReapiExecutor:
        from kiln.remote.stores import open_store

        opened = open_store(
            RemoteOptions(
                **{**options.__dict__, "remote_cache": options.remote_executor}  # same flags
            )
        )
        assert isinstance(opened, GrpcStore)
        return ReapiExecutor(opened, options, store)

    @property
    def address(self) -> str:
        return self.server.url

    def spawner(
        self,
        cas: ContentStore,
        *,
        digest_function: str,
        warn: Callable[[str], None],
        report: Callable[[str], None],
    ) -> ReapiSpawner:
        if not isinstance(self.store, GrpcStore):
            raise KilnError(
                "--remote_executor=grpc:// needs --remote_cache=grpc:// (a REAPI CAS the "
                "workers read inputs from)"
            )
        return ReapiSpawner(
            self.server, self.store, cas, self.options, digest_function=digest_function, warn=warn
        )

    def gpu_platform(self, local: HostFacts) -> _HerePlatform:
        return _HerePlatform(local)

    def describe(self, echo: Callable[[str], None]) -> None:
        try:
            caps = self.server.capabilities()
        except RemoteError as error:
            raise ExecutorUnreachable(error.message) from None
        echo(f"{self.address}: a Remote Execution API server")
        echo(f"  execution: {'enabled' if caps.exec_enabled else 'disabled'}")
        echo(f"  batch limit: {caps.max_batch} bytes")

    def close(self) -> None:
        self.server.close()
