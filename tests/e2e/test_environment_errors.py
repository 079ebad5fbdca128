"""A file system in kiln's way is one line naming the path and the fix, exit 1, never a
traceback (issue 11, B7): each case found crashing, pinned."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.kiln_workspace import KILN, Run, Workspace

BUILD = 'genrule(name = "x", srcs = ["in.txt"], outs = ["x.out"], cmd = "cat $< > $@")\n'


@pytest.fixture
def app(ws: Workspace) -> Workspace:
    ws.write("app/BUILD", BUILD)
    ws.write("app/in.txt", "hello\n")
    return ws


def _one_error(run: Run, error: str) -> None:
    assert run.code == 1, run.err
    assert error in run.err
    assert "Traceback" not in run.err and "INTERNAL ERROR" not in run.err


def _unprivileged(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    """kiln as a user the file modes apply to: root reads a mode-000 file anyway, so as
    root it runs in a user namespace of its own (owner bits apply, no capabilities)."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare: file modes do not apply")
        probe = subprocess.run(["unshare", "-U", "true"], capture_output=True, check=False)
        if probe.returncode != 0:
            pytest.skip("running as root and user namespaces are not allowed here")
        prefix = ["unshare", "-U"]
    return subprocess.run(
        [*prefix, *KILN, *args],
        cwd=ws.root,
        env=ws.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_unreadable_source_fails_its_action_naming_the_file(app: Workspace) -> None:
    (app.root / "app/in.txt").chmod(0)
    try:
        run = _unprivileged(app, "build", "//app:x")
    finally:
        (app.root / "app/in.txt").chmod(0o644)
    _one_error(
        Run(run.returncode, run.stdout, run.stderr),
        "ERROR: app/BUILD:1:1: Executing genrule //app:x failed: cannot read its input "
        "app/in.txt: Permission denied (make it readable, or take it out of the target's "
        "sources)\n",
    )


def test_an_unreadable_directory_in_the_workspace_names_it(app: Workspace) -> None:
    app.write("other/BUILD", 'filegroup(name = "o")\n')
    (app.root / "other").chmod(0)
    try:
        run = _unprivileged(app, "build", "//...")
    finally:
        (app.root / "other").chmod(0o755)
    _one_error(
        Run(run.returncode, run.stdout, run.stderr),
        f"ERROR: {app.root / 'other'}: Permission denied\n"
        "  hint: kiln needs to read the workspace, and to write kiln-out/, the output base "
        "and the disk cache: fix the permissions, or list a workspace directory in "
        ".kilnignore\n",
    )


def test_a_deleted_working_directory(app: Workspace) -> None:
    from kiln.cli import main

    gone = app.root / "app" / "gone"
    gone.mkdir()
    with app.monkeypatch.context() as patch:
        patch.chdir(gone)
        patch.setenv("PWD", str(gone))
        gone.rmdir()
        code = main(["build", "//app:x"])
    err = app.capsys.readouterr().err
    _one_error(
        Run(code, "", err),
        f"ERROR: the current directory {gone} no longer exists\n"
        "  hint: cd into the workspace again (a directory made anew under the same name is "
        "another directory)\n",
    )


def test_disk_cache_that_is_a_file(app: Workspace, tmp_path: Path) -> None:
    (tmp_path / "cache-file").write_text("")
    run = app.kiln("build", "//app:x", f"--disk_cache={tmp_path / 'cache-file'}")
    _one_error(
        run,
        f"ERROR: the disk cache {tmp_path}/cache-file cannot be created: {tmp_path}/cache-file "
        "is a file, not a directory\n"
        f"  hint: remove {tmp_path}/cache-file, or choose another directory with "
        "--disk_cache=DIR\n",
    )


def test_output_base_that_is_a_file(app: Workspace, tmp_path: Path) -> None:
    (tmp_path / "base-file").write_text("")
    run = app.kiln(f"--output_base={tmp_path / 'base-file'}", "build", "//app:x")
    _one_error(
        run,
        f"ERROR: the output base {tmp_path}/base-file cannot be created: {tmp_path}/base-file "
        "is a file, not a directory\n"
        f"  hint: remove {tmp_path}/base-file, or choose another directory with "
        "--output_base=DIR\n",
    )


def test_kiln_out_that_is_a_file(app: Workspace) -> None:
    (app.root / "kiln-out").write_text("")
    run = app.kiln("build", "//app:x")
    _one_error(
        run,
        f"ERROR: {app.root}/kiln-out is not a directory: kiln puts the build's outputs there\n"
        f"  hint: remove it (rm {app.root}/kiln-out) and build again\n",
    )


def test_a_package_folder_in_kiln_out_that_is_a_file(app: Workspace) -> None:
    (app.root / "kiln-out").mkdir()
    (app.root / "kiln-out/app").write_text("")
    run = app.kiln("build", "//app:x")
    _one_error(
        run,
        "ERROR: app/BUILD:1:1: Executing genrule //app:x failed: cannot place "
        "kiln-out/app/x.out: kiln-out/app is a file where a directory goes (remove it, or run "
        "'kiln clean')\n",
    )
    assert app.kiln("clean").code == 0  # what the message says works
    assert app.kiln("build", "//app:x").code == 0


def test_a_directory_where_an_output_goes(app: Workspace) -> None:
    assert app.kiln("build", "//app:x").code == 0
    (app.root / "kiln-out/app/x.out").unlink()
    (app.root / "kiln-out/app/x.out").mkdir()
    run = app.kiln("build", "//app:x")  # a disk cache hit: placing it is what fails
    _one_error(
        run,
        "ERROR: app/BUILD:1:1: Executing genrule //app:x failed: cannot place "
        "kiln-out/app/x.out: kiln-out/app/x.out is a directory where the output goes (remove "
        "it, or run 'kiln clean')\n",
    )


def test_profile_that_is_a_directory(app: Workspace, tmp_path: Path) -> None:
    run = app.kiln("build", "//app:x", f"--profile={tmp_path}")
    _one_error(
        run,
        f"ERROR: --profile={tmp_path} is a directory\n"
        f"  hint: name a file, e.g. --profile={tmp_path}/profile.json\n",
    )
    assert not (app.root / "kiln-out").exists()  # refused before anything was built


def test_build_event_file_in_a_missing_folder(app: Workspace, tmp_path: Path) -> None:
    events = tmp_path / "no" / "such" / "events.json"
    run = app.kiln("build", "//app:x", f"--build_event_json_file={events}")
    _one_error(
        run,
        f"ERROR: --build_event_json_file={events}: the folder {events.parent} does not exist\n"
        f"  hint: create it (mkdir -p {events.parent}), or name a file in an existing folder\n",
    )
