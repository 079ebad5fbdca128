"""--remote_cache against a real nginx (WebDAV, Bazel's HTTP cache protocol).

Two clones of one workspace, each with its own local cache, share results
through the server; the failure cases (a tampered blob, a server stopped
mid-build, a slow or failing one, a missing auth header) never fail a build.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)

from tests.fake_http_cache import fake_http_cache
from tests.kiln_workspace import Run, Workspace
from tests.nginx_cache import NginxCache, nginx_cache

BUILD = """
genrule(name = "a", srcs = ["a.txt"], outs = ["a.out"], cmd = "tr a-z A-Z < $< > $@")
genrule(name = "b", srcs = [":a.out"], outs = ["b.out"], cmd = "cat $(SRCS) $(SRCS) > $@")
genrule(
    name = "tool",
    outs = ["tool.sh"],
    cmd = "printf '#!/bin/sh\\\\necho hi\\\\n' > $@; chmod +x $@",
)
genrule(
    name = "big",
    srcs = [":b.out"],
    outs = ["big.bin"],
    cmd = "{ cat $(SRCS); head -c 3000000 /dev/zero | tr '\\\\0' k; } > $@",
)
genrule(name = "c", srcs = [":big", ":b"], outs = ["c.out"], cmd = "wc -c $(SRCS) > $@")
"""
OUTPUTS = ["app/a.out", "app/b.out", "app/tool.sh", "app/big.bin", "app/c.out"]
TOKEN = "kiln-test-token"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NginxCache]:
    with nginx_cache(tmp_path / "nginx") as server:
        yield server


@pytest.fixture
def clones(ws: Workspace) -> tuple[Workspace, Workspace]:
    ws.write("app/BUILD", BUILD)
    ws.write("app/a.txt", "hello\n")
    return ws, ws.copy("clone")


def _local_cache(ws: Workspace) -> Path:
    """The clone's own local cache, beside it."""
    return ws.root.parent / f"{ws.root.name}-cache"


def build(ws: Workspace, url: str, *flags: str) -> Run:
    """kiln build //app:all with the clone's own local cache."""
    return ws.kiln(
        "build",
        "//app:all",
        f"--disk_cache={_local_cache(ws)}",
        f"--remote_cache={url}",
        "--remote_timeout=5",
        *flags,
    )


def _outputs(ws: Workspace) -> dict[str, tuple[bytes, bool]]:
    out = ws.root / "kiln-out"
    return {p: ((out / p).read_bytes(), os.access(out / p, os.X_OK)) for p in OUTPUTS}


def _warnings(run: Run) -> list[str]:
    return [line for line in run.err.splitlines() if line.startswith("WARNING:")]


def test_a_second_clone_gets_everything_from_the_remote(
    clones: tuple[Workspace, Workspace], server: NginxCache, tmp_path: Path
) -> None:
    first, second = clones
    run = build(first, server.url)
    assert run.code == 0, run.err
    assert run.executed == 5
    assert "0 cache hits, 5 executed (5 local), 5 remote cache misses" in run.err
    events = tmp_path / "events.json"
    again = build(second, server.url, f"--build_event_json_file={events}")
    assert again.code == 0, again.err
    assert (again.executed, again.hits) == (0, 5)
    assert "INFO: 5 actions: 5 cache hits (0 disk, 5 remote), 0 executed" in again.err
    assert _outputs(second) == _outputs(first)
    assert _outputs(second)["app/tool.sh"][1]  # the executable bit came along
    finished = [
        json.loads(line) for line in events.read_text().splitlines() if '"action_finished"' in line
    ]
    assert {(e["cache"], e["remote_cache"]) for e in finished} == {("remote", "hit")}
    # The results are in the second clone's local cache now: a disk hit next time.
    shutil.rmtree(second.root / "kiln-out")
    third = build(second, server.url)
    assert "5 cache hits, 0 executed" in third.err
    assert _warnings(run) + _warnings(again) + _warnings(third) == []


def test_uploads_skip_blobs_the_server_has(
    clones: tuple[Workspace, Workspace], server: NginxCache
) -> None:
    first, second = clones
    build(first, server.url)
    build(second, server.url, "--noremote_accept_cached")  # runs all, uploads what is new
    blobs = list((server.root / "cas").iterdir())
    server.wait_for_log(
        lambda s: (
            len(s.requests("HEAD /cas/")) >= 2 * len(blobs)
            and len(s.requests("PUT /cas/")) >= len(blobs)
        )
    )
    assert len(server.requests("PUT /cas/")) == len(blobs)  # each blob sent once
    assert len(server.requests("HEAD /cas/")) == 2 * len(blobs)  # asked by each build


def test_noremote_accept_cached_builds_locally_and_never_asks(
    clones: tuple[Workspace, Workspace], server: NginxCache
) -> None:
    first, second = clones
    build(first, server.url)
    server.clear_log()
    run = build(second, server.url, "--noremote_accept_cached")
    assert run.executed == 5
    assert server.requests("GET") == []


def test_noremote_upload_local_results_leaves_the_server_empty(
    clones: tuple[Workspace, Workspace], server: NginxCache
) -> None:
    first, second = clones
    build(first, server.url, "--noremote_upload_local_results")
    assert [p for p in server.root.rglob("*") if p.is_file()] == []
    assert build(second, server.url).executed == 5


def test_a_tampered_blob_is_rejected_and_the_action_runs_locally(
    clones: tuple[Workspace, Workspace], server: NginxCache
) -> None:
    first, second = clones
    build(first, server.url)
    big = first.root / "kiln-out/app/big.bin"
    blob = server.root / "cas" / _hash(big)
    os.chmod(blob, 0o644)
    with blob.open("r+b") as f:  # same size, one byte changed
        f.seek(1000)
        f.write(b"X")
    run = build(second, server.url)
    assert run.code == 0, run.err
    warnings = _warnings(run)
    assert len(warnings) == 1
    assert "Executing genrule //app:big: rejected a blob from the remote cache" in warnings[0]
    assert "content does not hash to its digest" in warnings[0]
    assert run.executed == 1  # big ran here; c was still a remote hit
    assert _outputs(second) == _outputs(first)
    assert _hash(blob) == blob.name  # and the good blob replaced the bad one


def test_a_truncated_blob_is_rejected(
    clones: tuple[Workspace, Workspace], server: NginxCache
) -> None:
    first, second = clones
    build(first, server.url)
    blob = server.root / "cas" / _hash(first.root / "kiln-out/app/big.bin")
    os.chmod(blob, 0o644)
    os.truncate(blob, 1000)
    run = build(second, server.url)
    assert run.code == 0, run.err
    assert "1000 bytes where its digest" in "\n".join(_warnings(run))
    assert _outputs(second) == _outputs(first)


def test_an_entry_naming_a_path_outside_the_output_tree_is_refused(
    clones: tuple[Workspace, Workspace], server: NginxCache, tmp_path: Path
) -> None:
    first, second = clones
    events = tmp_path / "events.json"
    build(first, server.url, f"--build_event_json_file={events}")
    key = next(
        e["key"]
        for e in map(json.loads, events.read_text().splitlines())
        if e["type"] == "action_finished" and e["label"] == "//app:a"
    )
    victim = tmp_path / "victim.txt"
    blob = (first.root / "kiln-out/app/a.out").read_bytes()
    refusals = {
        str(victim): f"unusable remote cache entry (output path must be relative: '{victim}')",
        "../../victim.txt": "unusable remote cache entry (output path must be normalised, "
        "without '..': '../../victim.txt')",
        "kiln-out/app/b.out": "remote cache entry names an output the action does not "
        "declare: 'kiln-out/app/b.out'",
    }
    for path, refusal in refusals.items():
        message = re_pb2.ActionResult()
        message.output_files.add(
            path=path, digest=re_pb2.Digest(hash=_hash_bytes(blob), size_bytes=len(blob))
        )
        entry = server.root / "ac" / key
        os.chmod(entry, 0o644)
        entry.write_bytes(message.SerializeToString())
        run = build(second, server.url)
        assert run.code == 0, run.err
        assert f"WARNING: Executing genrule //app:a: {refusal}; building locally" in run.err
        assert not victim.exists()
        assert (second.root / "kiln-out/app/a.out").read_text() == "HELLO\n"
        shutil.rmtree(second.root / "kiln-out")
        shutil.rmtree(second.root.parent / "clone-cache")


def test_the_server_stopped_mid_build_is_one_warning(
    clones: tuple[Workspace, Workspace], server: NginxCache
) -> None:
    first, _ = clones
    # //app:b stops the server while the build runs; everything after it builds locally.
    pid = (server.directory / "nginx.pid").read_text().strip()  # the sandbox hides the file
    first.write(
        "app/BUILD",
        BUILD.replace(
            'cmd = "cat $(SRCS) $(SRCS) > $@"',
            f'cmd = "kill {pid}; sleep 0.5; cat $(SRCS) $(SRCS) > $@"',
        ),
    )
    run = build(first, server.url, "--jobs=1")
    assert run.code == 0, run.err
    warnings = _warnings(run)
    assert len(warnings) == 1, run.err
    assert f"remote cache {server.url} is unusable" in warnings[0]
    assert "building locally without it for the rest of this build" in warnings[0]
    assert run.executed == 5
    assert (first.root / "kiln-out/app/c.out").is_file()


def test_a_server_that_is_down_from_the_start(clones: tuple[Workspace, Workspace]) -> None:
    first, _ = clones
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = build(first, f"http://127.0.0.1:{port}")
    assert run.code == 0, run.err
    assert len(_warnings(run)) == 1
    assert "Connection refused" in _warnings(run)[0]
    assert run.executed == 5


@pytest.mark.parametrize(("mode", "error"), [("500", "HTTP 500"), ("hang", "timed out")])
def test_a_failing_or_slow_server_is_one_warning(
    clones: tuple[Workspace, Workspace], mode: str, error: str
) -> None:
    first, _ = clones
    with fake_http_cache(mode) as fake:
        run = build(first, fake.url, "--remote_timeout=0.3", "--jobs=1")
    assert run.code == 0, run.err
    assert len(_warnings(run)) == 1
    assert error in _warnings(run)[0]
    assert run.executed == 5
    assert len(fake.requests) == 1  # not asked again after the failure


def test_an_auth_header_the_server_requires(
    clones: tuple[Workspace, Workspace], tmp_path: Path
) -> None:
    first, second = clones
    with nginx_cache(tmp_path / "auth-nginx", token=TOKEN) as server:
        refused = build(first, server.url)
        assert refused.code == 0
        assert "HTTP 401 Unauthorized" in _warnings(refused)[0]
        shutil.rmtree(_local_cache(first))
        shutil.rmtree(first.root / "kiln-out")
        header = f"--remote_header=Authorization=Bearer {TOKEN}"
        assert build(first, server.url, header).executed == 5
        run = build(second, server.url, header)
    assert (run.executed, run.hits) == (0, 5)
    assert _warnings(run) == []


def test_remote_flags_from_the_rc_file(clones: tuple[Workspace, Workspace], tmp_path: Path) -> None:
    first, second = clones
    with nginx_cache(tmp_path / "rc-nginx", token=TOKEN) as server:
        for ws in clones:
            ws.write(
                ".kilnrc",
                f"build --remote_cache={server.url} --remote_instance_name=ci\n"
                f'build "--remote_header=Authorization=Bearer {TOKEN}"\n',
            )
        assert first.kiln("build", "//app:all", "--disk_cache=../a-cache").executed == 5
        run = second.kiln("build", "//app:all", "--disk_cache=../b-cache")
        assert (run.executed, run.hits) == (0, 5), run.err
        assert list((server.root / "ci" / "ac").iterdir())


def test_explain_says_remote_cache_miss_and_hit(
    clones: tuple[Workspace, Workspace], server: NginxCache
) -> None:
    first, second = clones
    run = build(first, server.url, "--explain")
    assert (
        "EXPLAIN: Genrule //app:a: remote cache miss; new action: never built in this workspace"
        in run.err
    )
    assert (
        "EXPLAIN: Genrule //app:a: remote cache hit" in build(second, server.url, "--explain").err
    )


def test_a_bad_remote_flag_is_an_error(clones: tuple[Workspace, Workspace]) -> None:
    first, _ = clones
    run = build(first, "ftp://example.com/")
    assert run.code == 1
    assert (
        "ERROR: invalid --remote_cache 'ftp://example.com/': unknown scheme 'ftp://' "
        "(kiln opens http://, https://, grpc://, grpcs://)\n"
        "  hint: write --remote_cache=http://HOST:PORT[/PREFIX] (a Bazel HTTP cache) "
        "or grpc://HOST:PORT (a Remote Execution API server)"
    ) in run.err
    header = first.kiln("build", "//app:a", "--remote_cache=http://h/", "--remote_header=oops")
    assert "not a header (Name=Value): 'oops'" in header.err


def _hash(path: Path) -> str:
    return _hash_bytes(path.read_bytes())


def _hash_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
