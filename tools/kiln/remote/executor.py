"""The seam to a remote executor: what a build and `kiln info cluster` ask of one.

    spawner(cas, ...)        the RemoteSpawner (kiln.exec.remote_spawn) the executor's
                             remote strategy hands actions to
    gpu_platform(local)      where analysis resolves GPU toolchains when GPU actions
                             run there (kiln.host_facts.RemotePlatform)
    describe(echo)           `kiln info cluster`: its machines and what they offer

Opened, not connected: a backend connects when first used, and says it could
not with ExecutorUnreachable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kiln.errors import KilnError

if TYPE_CHECKING:
    from kiln.cache.cas import ContentStore
    from kiln.exec.remote_spawn import RemoteSpawner
    from kiln.host_facts import HostFacts, RemotePlatform


class ExecutorUnreachable(KilnError):
    """The remote executor cannot be reached (refused, timed out, gone)."""


class RemoteExecutor(Protocol):
    @property
    def address(self) -> str:
        """The address it was opened with, normalised, for messages."""
        ...

    def spawner(
        self,
        cas: ContentStore,
        *,
        digest_function: str,
        warn: Callable[[str], None],
        report: Callable[[str], None],
    ) -> RemoteSpawner:
        """The spawner of this build; outputs come back into cas, verified."""
        ...

    def gpu_platform(self, local: HostFacts) -> RemotePlatform:
        """The machine GPU toolchains are resolved on (local: this machine's facts)."""
        ...

    def describe(self, echo: Callable[[str], None]) -> None:
        """Its machines, a line each and more; ExecutorUnreachable if it cannot be asked."""
        ...

    def close(self) -> None:
        """Disconnect; idempotent."""
        ...
