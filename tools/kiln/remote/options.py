"""RemoteOptions: what the remote backends read of the --remote_* flags, in one record.

Fields are named as the flags are, so the flag table fills it by name. It is
frozen and picklable: it crosses to a node inside each remote task
(kiln.remote_exec.protocol.RemoteTask) and keys the node's store clients.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kiln.errors import KilnError

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class RemoteOptions:
    remote_cache: str | None = None  # the store's address (http(s)://, grpc(s)://)
    remote_executor: str | None = None  # the executor's address (ray://, grpc(s)://)
    remote_header: tuple[str, ...] = ()  # Name=Value, sent with every store request
    remote_timeout: float = 60.0  # seconds any wait for a backend may take
    remote_min_rate: int = 1 << 20  # bytes per second a transfer keeps up with (1M)
    remote_instance_name: str = ""  # a path segment before ac/ and cas/
    remote_retries: int = 2  # runs again of a remote action whose worker died
    # grpcs:// (kiln.reapi.channel): PEM files, as Bazel's flags of the same names
    tls_certificate: str = ""  # roots the server's certificate must chain to
    tls_client_certificate: str = ""  # mutual TLS: this client's certificate chain
    tls_client_key: str = ""  # and its private key
    # KEY=VALUE platform properties every REAPI action carries (Bazel's flag of the name)
    remote_default_exec_properties: tuple[str, ...] = ()
    digest_function: str = "sha256"  # the build's: a grpc:// server must take it

    def __post_init__(self) -> None:
        object.__setattr__(self, "remote_header", tuple(self.remote_header))
        props = tuple(self.remote_default_exec_properties)
        object.__setattr__(self, "remote_default_exec_properties", props)


def scheme_of(address: str) -> str:
    """'ray://h:1' -> 'ray'; '' without one."""
    found = _SCHEME.match(address.strip())
    return found[1].lower() if found else ""


def unknown_scheme(flag: str, address: str, accepted: Sequence[str], hint: str) -> KilnError:
    """The error for an address no backend opens: the flag, the value, what is accepted."""
    scheme = scheme_of(address)
    what = f"unknown scheme '{scheme}://'" if scheme else "no scheme"
    return KilnError(
        f"invalid {flag} '{address}': {what} (kiln opens {', '.join(accepted)})", hint=hint
    )
