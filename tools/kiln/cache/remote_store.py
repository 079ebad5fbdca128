"""The seam to a remote store: an action cache and a CAS on a server, whatever speaks to it.

kiln's remote cache lookups and uploads (exec/remote_spawn_cache.py), the
remote executor's transfers (remote_exec/spawner.py) and a node's fetches
and uploads (remote_exec/node_runner.py) use only this protocol. The one
implementation today is the HTTP client (cache/remote.py, `http(s)://`);
kiln.remote.stores opens one by --remote_cache's scheme, so a REAPI client
over gRPC is a new module that fits here plus one arm there.

Every failure of the server (down, slow, refusing, answering nonsense) is a
RemoteError, which callers catch to build without the remote.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from kiln.cache.action_cache import ActionResult
from kiln.cache.cas import ContentStore
from kiln.cache.digest import Digest
from kiln.errors import KilnError

T = TypeVar("T")


class RemoteError(KilnError):
    """The remote cache cannot be used: down, slow, refusing, or answering nonsense."""


class RemoteStore(Protocol):
    """One server's action cache and CAS; safe to use from many threads."""

    @property
    def url(self) -> str:
        """Where it is, for messages (without a password)."""
        ...

    def get_action_result(self, key: str) -> ActionResult | None:
        """The result stored under key; None if the server has none (ValueError if the
        server's entry cannot be used)."""
        ...

    def put_action_result(self, key: str, result: ActionResult) -> None: ...

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        """The digests the server lacks (REAPI's FindMissingBlobs)."""
        ...

    def upload(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        """Send a blob of the local CAS (either variant)."""
        ...

    def upload_file(self, digest: Digest, path: Path) -> None:
        """Send the file at path, whose digest the caller knows."""
        ...

    def download(self, digest: Digest, cas: ContentStore, executable: bool = False) -> None:
        """Fetch the blob into cas, verified (BlobMismatch if the bytes are wrong)."""
        ...

    def transfer_many(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """Run the transfers in parallel; all end before the first error (a RemoteError
        first) is raised."""
        ...

    def close(self) -> None:
        """Close connections; the store may be used again after (it reconnects)."""
        ...


def download_outputs(store: RemoteStore, result: ActionResult, cas: ContentStore) -> None:
    """Every blob of a remote action's result into the local CAS, verified as it is
    written; a blob already there (in either variant) is not fetched again."""
    calls: list[Callable[[], None]] = []
    for digest, executable in dict.fromkeys(result.digests()):
        if cas.has(digest, executable):
            continue
        if cas.has(digest, not executable):
            cas.put_file(cas.path(digest, not executable), digest, executable)
        else:
            calls.append(functools.partial(store.download, digest, cas, executable))
    store.transfer_many(calls)
