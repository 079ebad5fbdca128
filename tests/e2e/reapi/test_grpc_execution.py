"""--remote_executor=grpc:// on a real BuildGrid with kiln workers (`kiln worker --reapi`)."""

from __future__ import annotations

import os

from tests.buildgrid_server import BuildGrid
from tests.kiln_workspace import Run, Workspace
from tests.reapi_workers import reapi_workers

BUILD = """
genrule(name = "a", srcs = ["a.txt"], outs = ["a.out"], cmd = "tr a-z A-Z < $< > $@")
genrule(
    name = "tool",
    outs = ["tool.sh"],
    cmd = "printf '#!/bin/sh\\\\necho hi\\\\n' > $@; chmod +x $@",
)
genrule(name = "c", srcs = [":a", ":tool"], outs = ["c.out"], cmd = "cat $(SRCS) > $@")
"""
OUTPUTS = ["app/a.out", "app/tool.sh", "app/c.out"]


def remote_build(ws: Workspace, grid: BuildGrid, *flags: str) -> Run:
    cache = ws.root.parent / f"{ws.root.name}-cache"
    return ws.kiln(
        "build",
        "//app:all",
        f"--disk_cache={cache}",
        f"--remote_cache={grid.address}",
        f"--remote_executor={grid.address}",
        "--spawn_strategy=remote",
        "--remote_timeout=20",
        *flags,
    )


def _outputs(ws: Workspace) -> dict[str, tuple[bytes, bool]]:
    out = ws.root / "kiln-out"
    return {p: ((out / p).read_bytes(), os.access(out / p, os.X_OK)) for p in OUTPUTS}


def test_genrules_built_remotely_are_the_bytes_built_here(
    ws: Workspace, buildgrid: BuildGrid
) -> None:
    ws.write("app/BUILD", BUILD)
    ws.write("app/a.txt", f"hello {ws.root}\n")
    local = ws.copy("local")
    assert local.kiln("build", "//app:all").code == 0
    with reapi_workers(ws, buildgrid, {"a": []}):
        run = remote_build(ws, buildgrid)
    assert run.code == 0, run.err
    assert "3 executed (3 remote-exec)" in run.err, run.err
    assert _outputs(ws) == _outputs(local)
    # A clean clone with only the cache: every action a remote cache hit, no worker needed.
    clone = ws.copy("clone")
    again = clone.kiln(
        "build",
        "//app:all",
        f"--disk_cache={clone.root.parent / 'clone-cache'}",
        f"--remote_cache={buildgrid.address}",
    )
    assert again.code == 0, again.err
    assert "3 cache hits (0 disk, 3 remote), 0 executed" in again.err, again.err
