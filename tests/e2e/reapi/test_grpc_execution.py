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


def remote_build(ws: Workspace, grid: BuildGrid, *flags: str, target: str = "//app:all") -> Run:
    cache = ws.root.parent / f"{ws.root.name}-cache"
    return ws.kiln(
        "build",
        target,
        f"--disk_cache={cache}",
        f"--remote_cache={grid.address}",
        f"--remote_executor={grid.address}",
        "--spawn_strategy=remote",
        "--remote_timeout=20",
        *flags,
    )


def unique(build: str, ws: Workspace) -> str:
    """The BUILD file with every action this test's own: the session's one server keeps
    every test's results."""
    return build.replace("echo hi", f"echo {ws.root.parent.name}")


def _outputs(ws: Workspace) -> dict[str, tuple[bytes, bool]]:
    out = ws.root / "kiln-out"
    return {p: ((out / p).read_bytes(), os.access(out / p, os.X_OK)) for p in OUTPUTS}


def test_genrules_built_remotely_are_the_bytes_built_here(
    ws: Workspace, buildgrid: BuildGrid
) -> None:
    ws.write("app/BUILD", unique(BUILD, ws))
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


def test_an_action_runs_on_the_worker_that_advertises_the_property_it_asks_for(
    ws: Workspace, buildgrid: BuildGrid
) -> None:
    # kiln-pool stands in for a GPU property (gpu=h200) on this GPU-less machine: the
    # server routes by both alike (tools/buildgrid.sh lists them in match-property-keys).
    ws.write("app/BUILD", unique(BUILD, ws))
    ws.write("app/a.txt", f"routed {ws.root}\n")
    with reapi_workers(ws, buildgrid, {"a": ["kiln-pool=a"], "b": ["kiln-pool=b"]}):
        run = remote_build(ws, buildgrid, "--remote_default_exec_properties=kiln-pool=b")
    assert run.code == 0, run.err
    assert "3 executed (3 remote-exec)" in run.err, run.err
    logs = {name: (ws.root.parent / f"worker-{name}.log").read_text() for name in "ab"}
    assert logs["b"].count(": finished (exit code 0)") == 3, logs
    assert "lease" not in logs["a"], logs


def test_a_server_that_is_down_fails_the_build_with_one_line_or_falls_back(ws: Workspace) -> None:
    ws.write("app/BUILD", unique(BUILD, ws))
    ws.write("app/a.txt", "down\n")
    down = "grpc://127.0.0.1:9"
    flags = (
        f"--remote_cache={down}",
        f"--remote_executor={down}",
        "--spawn_strategy=remote",
        "--remote_timeout=3",
    )
    run = ws.kiln("build", "//app:a", *flags)
    assert run.code == 1
    errors = [line for line in run.err.splitlines() if line.startswith("ERROR: app/BUILD")]
    assert len(errors) == 1 and "UNAVAILABLE" in errors[0], run.err
    assert "Traceback" not in run.err
    fallback = ws.kiln("build", "//app:a", *flags, "--remote_local_fallback")
    assert fallback.code == 0, fallback.err
    assert "1 executed (1 local)" in fallback.err
