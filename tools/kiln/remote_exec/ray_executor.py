"""The RemoteExecutor (kiln.remote.executor) of `--remote_executor=ray://HOST:PORT`.

It holds the Cluster (cluster.py, connected when first used) and the build's
store client, and makes of them the spawner (spawner.py), the GPU platform
(toolchains.py) and `kiln info cluster`'s description (describe.py).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.cache.cas import ContentStore
from kiln.cache.remote_store import RemoteStore
from kiln.errors import KilnError
from kiln.host_facts import HostFacts
from kiln.remote.options import RemoteOptions
from kiln.remote_exec.address import RayAddress
from kiln.remote_exec.cluster import Cluster
from kiln.remote_exec.describe import describe_cluster
from kiln.remote_exec.spawner import RaySpawner
from kiln.remote_exec.toolchains import ClusterGpuPlatform


class RayExecutor:
    def __init__(self, cluster: Cluster, options: RemoteOptions, store: RemoteStore | None):
        self.cluster = cluster
        self.options = options
        self.store = store

    @staticmethod
    def open(options: RemoteOptions, store: RemoteStore | None) -> RayExecutor:
        """KilnError unless --remote_executor is ray://HOST:PORT."""
        try:
            address = RayAddress.parse(options.remote_executor or "")
        except ValueError as error:
            raise KilnError(
                f"invalid --remote_executor: {error}",
                hint="write --remote_executor=ray://HOST:PORT",
            ) from None
        return RayExecutor(Cluster(address, timeout=options.remote_timeout), options, store)

    @property
    def address(self) -> str:
        return self.cluster.address.url

    def spawner(
        self,
        cas: ContentStore,
        *,
        digest_function: str,
        warn: Callable[[str], None],
        report: Callable[[str], None],
    ) -> RaySpawner:
        if self.store is None:  # inputs and outputs travel through it
            raise KilnError("--remote_executor needs --remote_cache")
        return RaySpawner(
            self.cluster,
            self.store,
            cas,
            self.options,
            digest_function=digest_function,
            retries=self.options.remote_retries,
            warn=warn,
            report=report,
        )

    def gpu_platform(self, local: HostFacts) -> ClusterGpuPlatform:
        return ClusterGpuPlatform(self.cluster, local)

    def describe(self, echo: Callable[[str], None]) -> None:
        describe_cluster(self.cluster, echo)

    def close(self) -> None:
        self.cluster.close()
