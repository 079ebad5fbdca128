"""--remote_cache=grpc:// against a real BuildGrid (REAPI's action cache, CAS, ByteStream).

Two clones of one workspace, each with its own local cache, share results
through the server, as they do through an HTTP cache (tests/e2e/test_remote_cache.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kiln.cache.digest import digest_file

from tests.buildgrid_server import BuildGrid
from tests.kiln_workspace import Run, Workspace

BUILD = """
genrule(name = "a", srcs = ["a.txt"], outs = ["a.out"], cmd = "tr a-z A-Z < $< > $@")
genrule(
    name = "tool",
    outs = ["tool.sh"],
    cmd = "printf '#!/bin/sh\\\\necho hi\\\\n' > $@; chmod +x $@",
)
genrule(
    name = "big",
    srcs = [":a.out"],
    outs = ["big.bin"],
    cmd = "{ cat $(SRCS); head -c 6000000 /dev/zero | tr '\\\\0' k; } > $@",
)
genrule(name = "c", srcs = [":big", ":a"], outs = ["c.out"], cmd = "wc -c $(SRCS) > $@")
"""
OUTPUTS = ["app/a.out", "app/tool.sh", "app/big.bin", "app/c.out"]


@pytest.fixture
def clones(ws: Workspace) -> tuple[Workspace, Workspace]:
    ws.write("app/BUILD", unique(BUILD, ws))
    # Unique per test: the session's one server keeps every test's results.
    ws.write("app/a.txt", f"hello {ws.root}\n")
    return ws, ws.copy("clone")


def build(ws: Workspace, address: str, *flags: str) -> Run:
    cache = ws.root.parent / f"{ws.root.name}-cache"
    return ws.kiln(
        "build",
        "//app:all",
        f"--disk_cache={cache}",
        f"--remote_cache={address}",
        "--remote_timeout=10",
        *flags,
    )


def unique(build: str, ws: Workspace) -> str:
    """The BUILD file with every action this test's own: the session's one server keeps
    every test's results."""
    return build.replace("echo hi", f"echo {ws.root.parent.name}")


def _outputs(ws: Workspace) -> dict[str, tuple[bytes, bool]]:
    out = ws.root / "kiln-out"
    return {p: ((out / p).read_bytes(), os.access(out / p, os.X_OK)) for p in OUTPUTS}


def test_a_second_clone_gets_everything_from_the_grpc_cache(
    clones: tuple[Workspace, Workspace], buildgrid: BuildGrid
) -> None:
    first, second = clones
    run = build(first, buildgrid.address)
    assert run.code == 0, run.err
    assert "0 cache hits, 4 executed (4 local), 4 remote cache misses" in run.err
    again = build(second, buildgrid.address)
    assert again.code == 0, again.err
    assert "INFO: 4 actions: 4 cache hits (0 disk, 4 remote), 0 executed" in again.err
    assert _outputs(second) == _outputs(first)
    assert _outputs(second)["app/tool.sh"][1]  # the executable bit came along
    # big.bin (6 MB) is over BuildGrid's 4 MiB batch limit: it went up by ByteStream.
    big = digest_file(first.root / "kiln-out/app/big.bin")
    assert (buildgrid.cas_dir / "cas/objects" / big.hash[:2] / big.hash[2:]).is_file()
    assert "WARNING" not in run.err + again.err


def test_a_blob_the_server_damaged_is_refused_and_built_here(
    clones: tuple[Workspace, Workspace], buildgrid: BuildGrid
) -> None:
    first, second = clones
    assert build(first, buildgrid.address).code == 0
    a_out = digest_file(first.root / "kiln-out/app/a.out")
    stored = buildgrid.cas_dir / "cas/objects" / a_out.hash[:2] / a_out.hash[2:]
    # Same length, other bytes: what only the client can notice.
    stored.write_bytes(bytes(reversed(stored.read_bytes())))
    again = build(second, buildgrid.address)
    assert again.code == 0, again.err
    assert (second.root / "kiln-out/app/a.out").read_bytes() == (
        first.root / "kiln-out/app/a.out"
    ).read_bytes()
    assert "does not hash to its digest" in again.err, again.err
    assert "4 executed" not in again.err  # only the damaged action ran again


def test_an_unknown_digest_function_is_one_clear_warning(
    clones: tuple[Workspace, Workspace], buildgrid: BuildGrid
) -> None:
    first, _ = clones
    run = build(first, buildgrid.address, "--digest_function=blake3")
    assert run.code == 0, run.err
    assert "does not take --digest_function=blake3 (it offers SHA256)" in run.err


def test_a_server_that_is_down_never_fails_the_build(
    clones: tuple[Workspace, Workspace], tmp_path: Path
) -> None:
    first, _ = clones
    run = build(first, "grpc://127.0.0.1:9", "--remote_timeout=2")
    assert run.code == 0, run.err
    assert "4 executed (4 local)" in run.err
    assert run.err.count("WARNING") == 1, run.err
