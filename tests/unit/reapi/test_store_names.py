"""GrpcStore's names on the wire: action-cache digests for kiln's keys, ByteStream resources."""

from __future__ import annotations

from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from kiln.cache.digest import Digest, digest_bytes
from kiln.reapi.channel import ChannelSpec
from kiln.reapi.store import GrpcStore, action_cache_digest

KEY = "ab" * 32
BLOB = Digest("cd" * 32, 12)


def test_a_kiln_key_is_stored_under_the_digest_of_an_action_salted_with_it() -> None:
    digest = action_cache_digest(KEY)
    action = re_pb2.Action(salt=b"kiln-action-key:" + KEY.encode())
    assert digest == digest_bytes(action.SerializeToString(deterministic=True))
    assert action_cache_digest("ef" * 32) != digest


def test_resource_names_follow_the_bytestream_spelling_of_reapi() -> None:
    store = GrpcStore(ChannelSpec.parse("grpc://h:1"), instance_name="ci/main")
    assert store._resource(BLOB) == f"ci/main/blobs/{BLOB.hash}/12"
    assert store._resource(BLOB, upload="u1") == f"ci/main/uploads/u1/blobs/{BLOB.hash}/12"
    bare = GrpcStore(ChannelSpec.parse("grpc://h:1"), digest_function="blake3")
    assert bare._resource(BLOB) == f"blake3/blobs/{BLOB.hash}/12"


def test_channel_spec_reads_the_address_and_defaults_the_port() -> None:
    assert ChannelSpec.parse("grpc://h").target == "h:80"
    assert ChannelSpec.parse("grpcs://h").target == "h:443"
    assert ChannelSpec.parse("grpc://[::1]:5").target == "[::1]:5"
    assert ChannelSpec.parse("GRPCS://h:5").address == "grpcs://h:5"
