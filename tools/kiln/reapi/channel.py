"""The gRPC channel to a REAPI server: its address, TLS and the headers every call carries.

    grpc://HOST:PORT     plain text (a farm on a private network, the tests' BuildGrid)
    grpcs://HOST:PORT    TLS: the system's roots, or --tls_certificate's; a client
                         certificate and key for mutual TLS (--tls_client_certificate,
                         --tls_client_key), as Bazel's flags of the same names

--remote_header NAME=VALUE goes as gRPC metadata on every call (names lowercased,
as HTTP/2 requires), which is how farms take their API keys
(`x-buildbuddy-api-key=...`, `authorization=Bearer ...`).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import grpc

# A Directory tree or a batch can pass gRPC's 4 MiB default; servers cap batches anyway.
_MAX_MESSAGE = 64 << 20


@dataclass(frozen=True)
class ChannelSpec:
    target: str  # host:port, as gRPC takes it
    tls: bool
    tls_certificate: str = ""  # PEM file of the roots the server's certificate must chain to
    tls_client_certificate: str = ""
    tls_client_key: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def parse(address: str, **fields: object) -> ChannelSpec:
        """grpc(s)://HOST:PORT -> the spec; ValueError for anything else."""
        parts = urllib.parse.urlsplit(address.strip())
        if parts.scheme not in ("grpc", "grpcs") or not parts.hostname:
            raise ValueError(f"not a grpc:// or grpcs:// address: {address!r}")
        if parts.path.strip("/") or parts.query or parts.fragment:
            raise ValueError(
                f"a REAPI address is grpc(s)://HOST:PORT, with no path: {address!r} "
                "(an instance name goes in --remote_instance_name)"
            )
        try:
            port = parts.port or (443 if parts.scheme == "grpcs" else 80)
        except ValueError:
            raise ValueError(f"bad port in {address!r}") from None
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return ChannelSpec(f"{host}:{port}", parts.scheme == "grpcs", **fields)  # type: ignore[arg-type]

    @property
    def address(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://{self.target}"

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return tuple((name.lower(), value) for name, value in self.headers)

    def open(self) -> grpc.Channel:
        options = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            # A dropped connection is noticed within seconds, not at the next call's deadline.
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
        ]
        if not self.tls:
            return grpc.insecure_channel(self.target, options=options)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(self.tls_certificate),
            private_key=_read(self.tls_client_key),
            certificate_chain=_read(self.tls_client_certificate),
        )
        return grpc.secure_channel(self.target, credentials, options=options)


def _read(path: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
