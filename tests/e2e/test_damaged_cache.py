"""A damaged blob is never served (issue 11 A1): kiln-out/ files are hard links of CAS
blobs (one inode, and root ignores the read-only mode), so an edit of a kiln-out/ file
in place or a flipped byte in a blob was served as a hit, fed to dependents, cached
under keys claiming the right input and uploaded: a fresh machine then got wrong
outputs from the remote."""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.kiln_workspace import KILN, Run, Workspace
from tests.nginx_cache import nginx_cache

BUILD = """
genrule(name = "a", srcs = ["in.txt"], outs = ["a.txt"], cmd = "cat $< > $@")
genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "cat $< $< > $@")
"""


def workspace(ws: Workspace) -> Workspace:
    ws.write("pkg/BUILD", BUILD)
    ws.write("pkg/in.txt", "hello\n")
    return ws


def blob_of(ws: Workspace, path: str) -> Path:
    digest = hashlib.sha256((ws.root / path).read_bytes()).hexdigest()
    return ws.disk_cache / "cas" / digest[:2] / digest


def write_in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as f:  # root ignores the read-only mode
        f.write(data)


def warnings(run: Run) -> list[str]:
    return [line for line in run.err.splitlines() if line.startswith("WARNING:")]


def test_an_edited_kiln_out_file_is_not_served_nor_fed_to_its_dependents(ws: Workspace) -> None:
    workspace(ws)
    assert ws.kiln("build", "//pkg:b").code == 0
    write_in_place(ws.root / "kiln-out/pkg/a.txt", b"j")  # its blob's inode too
    ws.write("pkg/BUILD", BUILD.replace("$< $< > $@", "$< $< $< > $@"))  # b must run
    run = ws.kiln("build", "//pkg:b")
    assert run.code == 0, run.err
    assert ws.out("pkg/a.txt") == "hello\n"
    assert ws.out("pkg/b.txt") == "hello\n" * 3
    assert run.executed == 2  # a ran again: its cached result was the damaged blob
    [warning] = warnings(run)
    assert "removed a damaged blob from the disk cache" in warning


def test_a_flipped_byte_in_a_blob_is_rebuilt_not_served_as_a_hit(ws: Workspace) -> None:
    workspace(ws)
    assert ws.kiln("build", "//pkg:b").code == 0
    blob = blob_of(ws, "kiln-out/pkg/b.txt")
    shutil.rmtree(ws.root / "kiln-out")
    write_in_place(blob, b"J")
    run = ws.kiln("build", "//pkg:b")
    assert run.code == 0, run.err
    assert (run.hits, run.executed) == (1, 1)  # a was a hit, b ran again
    assert ws.out("pkg/b.txt") == "hello\n" * 2
    assert len(warnings(run)) == 1
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name  # good again


def test_a_damaged_blob_is_never_uploaded(ws: Workspace, tmp_path: Path) -> None:
    workspace(ws)
    with nginx_cache(tmp_path / "nginx") as server:
        remote = f"--remote_cache={server.url}"
        assert ws.kiln("build", "//pkg:a", "--noremote_upload_local_results").code == 0
        write_in_place(blob_of(ws, "kiln-out/pkg/a.txt"), b"J")
        run = ws.kiln("build", "//pkg:b", remote)
        assert run.code == 0, run.err
        for blob in (server.root / "cas").iterdir():
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
        other = ws.copy("fresh")
        got = other.kiln("build", "//pkg:b", remote, f"--disk_cache={tmp_path / 'other'}")
        assert got.code == 0, got.err
        assert (other.out("pkg/a.txt"), other.out("pkg/b.txt")) == ("hello\n", "hello\n" * 2)


def test_a_blob_gone_behind_an_up_to_date_output_is_put_back_from_kiln_out(
    ws: Workspace,
) -> None:
    """Issue 11 B1: blobs that left the CAS (collected by another workspace, a deleted
    shared cache) while kiln-out/ depended on them failed every later build with
    'ERROR: blob <hash>/<size> is not in the local cache', until `kiln clean`."""
    workspace(ws)
    assert ws.kiln("build", "//pkg:b").code == 0
    shutil.rmtree(ws.disk_cache / "cas")
    ws.write("pkg/BUILD", BUILD.replace("$< $< > $@", "$< $< $< > $@"))  # b runs, reading a
    run = ws.kiln("build", "//pkg:b")
    assert run.code == 0, run.err
    assert ws.out("pkg/b.txt") == "hello\n" * 3
    assert run.executed == 1  # a stayed up to date: its blob came back from kiln-out/
    assert blob_of(ws, "kiln-out/pkg/a.txt").read_bytes() == b"hello\n"


def test_a_blob_gone_and_its_kiln_out_file_edited_reruns_the_producer(ws: Workspace) -> None:
    workspace(ws)
    assert ws.kiln("build", "//pkg:b").code == 0
    shutil.rmtree(ws.disk_cache / "cas")
    write_in_place(ws.root / "kiln-out/pkg/a.txt", b"j")
    ws.write("pkg/BUILD", BUILD.replace("$< $< > $@", "$< $< $< > $@"))
    run = ws.kiln("build", "//pkg:b")
    assert run.code == 0, run.err
    assert run.executed == 2
    assert (ws.out("pkg/a.txt"), ws.out("pkg/b.txt")) == ("hello\n", "hello\n" * 3)


def test_a_concurrent_expunge_of_the_shared_disk_cache_never_breaks_a_build(
    ws: Workspace, tmp_path: Path
) -> None:
    """Issue 11 B2: `clean --expunge` of a shared disk cache during another workspace's
    build crashed that build with a traceback."""
    packages = 30
    for p in range(packages):
        dep = f'"//p{p - 1}:g", ' if p else ""
        ws.write(
            f"p{p}/BUILD",
            f'genrule(name = "g", srcs = [{dep}"s.txt"], outs = ["g.txt"], '
            'visibility = ["//visibility:public"], cmd = "cat $(SRCS) > $@; sleep 0.05")\n',
        )
        ws.write(f"p{p}/s.txt", f"{p}\n")
    cache = f"--disk_cache={tmp_path / 'shared'}"
    other = tmp_path / "other"
    other.mkdir()
    (other / "WORKSPACE").write_text("")
    build = ws.kiln_process("build", "//...", cache, "--jobs=2")
    expunges = 0
    while build.poll() is None:
        time.sleep(0.2)
        expunge = subprocess.run(
            [*KILN, "clean", "--expunge_disk_cache", cache],
            cwd=other,
            env=ws.env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert expunge.returncode == 0, expunge.stderr
        expunges += 1
    _, err = build.communicate()
    assert (build.returncode, "Traceback" in err) == (0, False), err
    assert expunges >= 3
    assert ws.out(f"p{packages - 1}/g.txt") == "".join(f"{p}\n" for p in range(packages))


def test_an_action_failing_on_a_full_disk_says_the_disk_is_full(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11 A5: a remote had filled the disk, and the action that then failed with
    ENOSPC was reported as 'exited with code 1', nothing more."""
    from kiln.exec import execroot_files

    Usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(execroot_files, "_disk_usage", lambda _p: Usage(1 << 30, 1 << 30, 4096))
    ws.write("pkg/BUILD", 'genrule(name = "x", outs = ["x.txt"], cmd = "exit 1")\n')
    run = ws.kiln("build", "//pkg:x")
    assert run.code == 1
    assert "failed: exited with code 1 (the disk holding its execroot " in run.err
    assert "is full: 4 KiB free)" in run.err


def test_a_noop_build_verifies_by_stat_and_hashes_no_file(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deliverable 1's cost: every blob is verified before use, but an unchanged one by
    its stamp (the digest log's stat data), so a no-op build reads no file's bytes."""
    from kiln.cache import digest_cache

    workspace(ws)
    old = time.time() - 3600  # not racily clean: its stamp is trusted at once
    os.utime(ws.root / "pkg/in.txt", (old, old))
    assert ws.kiln("build", "//pkg:b").code == 0
    hashed: list[str] = []
    real = digest_cache.digest_file

    def counting(path: str | os.PathLike[str], function: str = "sha256") -> object:
        hashed.append(os.fspath(path))
        return real(path, function)

    monkeypatch.setattr(digest_cache, "digest_file", counting)
    run = ws.kiln("build", "//pkg:b")
    assert (run.code, run.executed) == (0, 0), run.err
    assert hashed == []
    write_in_place(ws.root / "kiln-out/pkg/a.txt", b"J")  # the same size, a new ctime
    run = ws.kiln("build", "//pkg:b")
    assert run.code == 0, run.err
    assert ws.out("pkg/a.txt") == "hello\n"
    assert any(path.endswith("a.txt") or "/cas/" in path for path in hashed), hashed
