"""Bazel shares kiln's rules' results through the project's nginx, like any Bazel cache.

The session's Bazel build uploaded to nginx (--remote_cache). A second output base
over the same workspace (another --output_user_root, so nothing local is shared)
then builds //models:mlp_pt2 (resnet would add only downloads): every action, the
planning actions and the torch ones alike, must be a remote cache hit, and the
outputs the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from tests.bazel_workspace import Bazel, Result
from tests.e2e.bazel.conftest import Twins

pytestmark = pytest.mark.torch

FILES = (
    "mlp_pt2.pt2",
    "mlp_pt2.structure.pt2",
    "mlp_pt2.program.pt2",
    "mlp_pt2.validation.json",
    "mlp_pt2.compile.json",
)


@pytest.fixture(scope="module")
def second(twins: Twins) -> Iterator[tuple[Bazel, Result]]:
    bazel = Bazel.at(twins.root, twins.base / "bazel-root-2", twins.base / "bazel-home-2")
    try:
        yield bazel, bazel.build(f"--remote_cache={twins.nginx.url}", "//models:mlp_pt2")
    finally:
        bazel.shutdown()


def test_second_output_base_hits_the_remote_for_every_action(
    second: tuple[Bazel, Result],
) -> None:
    _, built = second
    assert built.code == 0, built.err[-4000:]
    hits = built.processes("remote cache hit")
    assert hits == 7  # the plans of mlp and mlp_pt2; export, compile, join, validate, manifest
    assert built.processes("processwrapper-sandbox") == 0  # nothing ran here


def test_remote_hits_are_the_same_bytes(twins: Twins, second: tuple[Bazel, Result]) -> None:
    bazel, _ = second
    for name in FILES:
        first = (twins.bazel_bin / "models" / name).read_bytes()
        again = (bazel.bin / "models" / name).read_bytes()
        assert hashlib.sha256(first).digest() == hashlib.sha256(again).digest(), name


def test_nginx_served_the_blobs(twins: Twins) -> None:
    assert any(r.startswith("GET /ac/") and r.endswith(" 200") for r in twins.nginx.requests())
    assert any(r.startswith("GET /cas/") and r.endswith(" 200") for r in twins.nginx.requests())
