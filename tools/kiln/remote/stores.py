"""open_store: the RemoteStore --remote_cache names, by its address's scheme.

    http://, https://   kiln.cache.remote.RemoteCache (Bazel's HTTP cache protocol)

A gRPC store (REAPI's ActionCache, ContentAddressableStorage, ByteStream) is
one more arm here.
"""

from __future__ import annotations

from kiln.cache.remote_store import RemoteStore
from kiln.errors import KilnError
from kiln.remote.options import RemoteOptions, scheme_of, unknown_scheme

SCHEMES = ("http://", "https://")


def open_store(options: RemoteOptions) -> RemoteStore | None:
    """The store, not connected yet; None without --remote_cache. KilnError on a bad flag."""
    address = options.remote_cache
    if not address:
        return None
    if scheme_of(address) in ("http", "https"):
        return _http(address, options)
    raise unknown_scheme(
        "--remote_cache",
        address,
        SCHEMES,
        hint="write --remote_cache=http://HOST:PORT[/PREFIX] (a Bazel HTTP cache)",
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
