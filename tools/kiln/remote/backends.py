"""open_executor: the RemoteExecutor --remote_executor names, by its address's scheme.

    ray://HOST:PORT     kiln.remote_exec (a Ray cluster, by its Ray Client address)
    grpc(s)://HOST:PORT kiln.reapi (a Remote Execution API server: BuildGrid, Buildbarn, ...)

Each arm imports its backend only when chosen: a build without the flag never
imports Ray or gRPC.
"""

from __future__ import annotations

from kiln.cache.remote_store import RemoteStore
from kiln.remote.executor import RemoteExecutor
from kiln.remote.options import RemoteOptions, scheme_of, unknown_scheme

SCHEMES = ("ray://", "grpc://", "grpcs://")


def open_executor(options: RemoteOptions, store: RemoteStore | None) -> RemoteExecutor | None:
    """The executor, not connected yet; None without --remote_executor. KilnError on a
    bad flag. Its spawner moves blobs through `store` (the build's one store client)."""
    address = options.remote_executor
    if not address:
        return None
    if scheme_of(address) == "ray":
        from kiln.remote_exec.ray_executor import RayExecutor

        return RayExecutor.open(options, store)
    if scheme_of(address) in ("grpc", "grpcs"):
        from kiln.reapi.executor import ReapiExecutor

        return ReapiExecutor.open(options, store)
    raise unknown_scheme(
        "--remote_executor",
        address,
        SCHEMES,
        hint="write --remote_executor=ray://HOST:PORT (a Ray cluster's client address) or "
        "grpc://HOST:PORT (a Remote Execution API server)",
    )
