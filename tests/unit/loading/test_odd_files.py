"""Files that txtar cases cannot make: a FIFO, symlinks, folders whose names are no
package names. Each used to give a misleading message (issue 11)."""

from __future__ import annotations

import os

import pytest

from tests.kiln_workspace import MakeWorkspace

FIFO = "actions read whole files: write the data to a regular file"
DANGLING = "point the link at a file, or remove it"


@pytest.mark.parametrize(
    ("make", "what", "hint"),
    [
        (os.mkfifo, "a FIFO", FIFO),
        (lambda p: os.symlink(p.name, p), "a symlink loop", "point the link at a file"),
        (lambda p: os.symlink("gone", p), "a symlink to nothing", DANGLING),
    ],
    ids=["fifo", "symlink_loop", "dangling_symlink"],
)  # fmt: skip
def test_source_that_is_no_regular_file_says_what_it_is(
    make_workspace: MakeWorkspace, make: object, what: str, hint: str
) -> None:
    ws = make_workspace({"p/BUILD": 'filegroup(name = "a", srcs = ["odd"])\n'})
    make(ws.root / "p/odd")  # type: ignore[operator]
    run = ws.kiln("query", "deps(//p:a)")
    assert (run.code, run.out) == (1, "")
    assert run.err == (
        f"ERROR: p/BUILD:1:1: //p:a: attribute 'srcs' refers to '//p:odd': 'odd' is {what}, "
        f"not a source file\n  hint: {hint}\n"
    )


@pytest.mark.parametrize(
    ("folder", "reason"),
    [
        ("my pkg", "package name contains the character ' '"),
        ("a:b", "package name contains the character ':'"),
    ],
)
def test_folder_whose_path_is_no_package_name_is_named(
    make_workspace: MakeWorkspace, folder: str, reason: str
) -> None:
    # `a:b/BUILD` made `kiln query //...` load package 'a' and fail on that.
    ws = make_workspace({"ok/BUILD": 'filegroup(name = "x")\n', f"{folder}/BUILD": ""})
    run = ws.kiln("query", "//...")
    assert run.code == 1
    assert run.err == (
        f"ERROR: {folder}/BUILD: folder '{folder}' holds a BUILD file, but its path is no "
        f"package name: {reason}\n"
        "  hint: rename the folder, or list it in .kilnignore to leave it out\n"
    )
    ws.write(".kilnignore", f"{folder}\n")
    assert ws.query("//...") == ["//ok:x"]


# What kiln reads itself (BUILD, .bzl, the @pip lock, .kilnignore, .kilnrc) is opened
# without blocking and refused unless it is a regular file: a FIFO hung loading for ever,
# and /dev/zero as the lock was read until the kernel killed kiln (issue 20).
NOT_A_FILE = {
    "fifo": (os.mkfifo, "it is a FIFO, not a regular file (replace it with one)"),
    "dev_zero": (
        lambda p: os.symlink("/dev/zero", p),
        "it is a character device, not a regular file (replace it with one)",
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", NOT_A_FILE)
def test_a_bzl_file_that_is_no_regular_file_is_refused_at_once(
    make_workspace: MakeWorkspace, kind: str
) -> None:
    make, why = NOT_A_FILE[kind]
    ws = make_workspace({"p/BUILD": 'load(":defs.bzl", "x")\n'})
    make(ws.root / "p/defs.bzl")  # type: ignore[operator]
    run = ws.kiln("query", "//p:all")
    assert (run.code, run.out) == (1, "")
    assert run.err == f"ERROR: p/BUILD:1:1: cannot load '//p:defs.bzl': {why}\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", NOT_A_FILE)
def test_a_pip_lock_that_is_no_regular_file_is_refused_at_once(
    make_workspace: MakeWorkspace, kind: str
) -> None:
    make, why = NOT_A_FILE[kind]
    ws = make_workspace(
        {
            "BUILD": 'python_requirements(name = "pip", lock = "requirements_lock.txt")\n',
            "p/BUILD": 'filegroup(name = "a", srcs = ["@pip//rich"])\n',
        }
    )
    make(ws.root / "requirements_lock.txt")  # type: ignore[operator]
    run = ws.kiln("query", "deps(//p:a)")
    assert (run.code, run.out) == (1, "")
    assert run.err == (
        f"ERROR: cannot read the lock requirements_lock.txt of //:pip: {why}\n"
        "  hint: create it with `python -m kiln.pyenv.lock requirements.in`\n"
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", NOT_A_FILE)
def test_a_kilnignore_that_is_no_regular_file_is_refused_at_once(
    make_workspace: MakeWorkspace, kind: str
) -> None:
    make, why = NOT_A_FILE[kind]
    ws = make_workspace({"ok/BUILD": ""})
    make(ws.root / ".kilnignore")  # type: ignore[operator]
    run = ws.kiln("query", "//...")
    assert (run.code, run.out) == (1, "")
    assert run.err.startswith(f"ERROR: cannot read {ws.root / '.kilnignore'}: {why}\n")
