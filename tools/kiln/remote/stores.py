"""open_store: the RemoteStore --remote_cache names, by its address's scheme.

http://, https://   kiln.cache.remote.RemoteCache (Bazel's HTTP cache protocol)
grpc://, grpcs://   kiln.reapi.store.GrpcStore (REAPI's ActionCache,
                    ContentAddressableStorage, ByteStream)
"""

from __future__ import annotations

from kiln.cache.remote_store import RemoteStore
from kiln.errors import KilnError
from kiln.remote.options import RemoteOptions, scheme_of, unknown_scheme

SCHEMES = ("http://", "https://", "grpc://", "grpcs://")


def open_store(options: RemoteOptions) -> RemoteStore | None:
    """The store, not connected yet; None without --remote_cache. KilnError on a bad flag."""
    address = options.remote_cache
    if not address:
        return None
    if scheme_of(address) in ("http", "https"):
        return _http(address, options)
    if scheme_of(address) in ("grpc", "grpcs"):
        return _grpc(address, options)
    raise unknown_scheme(
        "--remote_cache",
        address,
        SCHEMES,
        hint="write --remote_cache=http://HOST:PORT[/PREFIX] (a Bazel HTTP cache) or "
        "grpc://HOST:PORT (a Remote Execution API server)",
    )


def _http(address: str, options: RemoteOptions) -> RemoteStore:
    from kiln.cache.remote import RemoteCache, parse_header

    try:
        return RemoteCache(
            address,
            headers=[parse_header(text) for text in options.remote_header],
            timeout=options.remote_timeout,
            instance_name=options.remote_instance_name,
            min_rate=options.remote_min_rate,
        )
    except ValueError as e:
        raise KilnError(
            f"invalid --remote_* option: {e}",
            hint="--remote_cache=http(s)://host:port[/prefix] --remote_header=Name=Value",
        ) from None


def _grpc(address: str, options: RemoteOptions) -> RemoteStore:
    from kiln.cache.remote import parse_header
    from kiln.reapi.channel import ChannelSpec
    from kiln.reapi.store import GrpcStore

    try:
        spec = ChannelSpec.parse(
            address,
            headers=tuple(parse_header(text) for text in options.remote_header),
            tls_certificate=options.tls_certificate,
            tls_client_certificate=options.tls_client_certificate,
            tls_client_key=options.tls_client_key,
        )
    except ValueError as e:
        raise KilnError(
            f"invalid --remote_* option: {e}",
            hint="--remote_cache=grpc(s)://host:port --remote_instance_name=NAME "
            "--remote_header=Name=Value",
        ) from None
    return GrpcStore(
        spec,
        instance_name=options.remote_instance_name,
        timeout=options.remote_timeout,
        min_rate=options.remote_min_rate,
        digest_function=options.digest_function,
    )
