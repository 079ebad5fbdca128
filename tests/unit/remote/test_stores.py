"""open_store: --remote_cache's scheme picks the store; the record's fields reach it."""

from __future__ import annotations

import pytest
from kiln.cache.remote import RemoteCache
from kiln.errors import KilnError
from kiln.remote.options import RemoteOptions
from kiln.remote.stores import open_store


def test_without_remote_cache_there_is_no_store() -> None:
    assert open_store(RemoteOptions()) is None
    assert open_store(RemoteOptions(remote_executor="ray://h:1")) is None


@pytest.mark.parametrize("address", ["http://cache:8080/base", "HTTPS://cache/"])
def test_http_and_https_open_the_http_store_with_every_option(address: str) -> None:
    options = RemoteOptions(
        remote_cache=address,
        remote_header=("Authorization=Bearer t",),
        remote_timeout=7.5,
        remote_min_rate=4096,
        remote_instance_name="ci",
    )
    store = open_store(options)
    assert isinstance(store, RemoteCache)
    assert (store.timeout, store.min_rate) == (7.5, 4096)
    assert ("Authorization", "Bearer t") in store._headers
    assert store._prefix.endswith("/ci")


def test_an_unknown_scheme_names_the_flag_the_value_and_what_kiln_opens() -> None:
    with pytest.raises(KilnError) as raised:
        open_store(RemoteOptions(remote_cache="s3://cache:9092"))
    assert raised.value.message == (
        "invalid --remote_cache 's3://cache:9092': unknown scheme 's3://' "
        "(kiln opens http://, https://, grpc://, grpcs://)"
    )
    hint = (
        "write --remote_cache=http://HOST:PORT[/PREFIX] (a Bazel HTTP cache) or "
        "grpc://HOST:PORT (a Remote Execution API server)"
    )
    assert raised.value.hint == hint


def test_grpc_opens_the_reapi_store_with_every_option() -> None:
    from kiln.reapi.store import GrpcStore

    options = RemoteOptions(
        remote_cache="grpcs://farm.example:8980",
        remote_header=("X-BuildBuddy-API-Key=k",),
        remote_timeout=7.5,
        remote_min_rate=4096,
        remote_instance_name="ci/main",
        tls_certificate="/etc/ca.pem",
    )
    store = open_store(options)
    assert isinstance(store, GrpcStore)
    assert (store.url, store.instance_name, store.timeout, store.min_rate) == (
        "grpcs://farm.example:8980",
        "ci/main",
        7.5,
        4096,
    )
    assert store.spec.metadata == (("x-buildbuddy-api-key", "k"),)
    assert store.spec.tls_certificate == "/etc/ca.pem"


def test_a_grpc_address_with_a_path_says_where_the_instance_name_goes() -> None:
    with pytest.raises(KilnError, match="an instance name goes in --remote_instance_name"):
        open_store(RemoteOptions(remote_cache="grpc://farm:8980/main"))


def test_an_address_without_a_scheme_says_so() -> None:
    with pytest.raises(KilnError, match=r"^invalid --remote_cache 'cache:8080': no scheme "):
        open_store(RemoteOptions(remote_cache="cache:8080"))


def test_a_bad_header_is_a_flag_error() -> None:
    with pytest.raises(KilnError, match=r"invalid --remote_\* option: not a header"):
        open_store(RemoteOptions(remote_cache="http://h/", remote_header=("oops",)))
