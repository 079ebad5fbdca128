"""Hermetic actions (issue 11 A3, A4): an action sees its declared inputs, read-only, and
the toolchain; its key holds every input's executable bit."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.kiln_workspace import KILN, Workspace


def test_chmod_x_of_an_input_reruns_the_action(ws: Workspace) -> None:
    """A4: the executable bit was not in the key: `chmod +x` was a cache hit, stale."""
    ws.write(
        "pkg/BUILD",
        'genrule(name = "x", srcs = ["tool.sh"], outs = ["x.txt"], '
        'cmd = "if test -x $<; then echo runnable; else echo plain; fi > $@")\n',
    )
    tool = ws.write("pkg/tool.sh", "echo hi\n")
    assert ws.kiln("build", "//pkg:x").code == 0
    assert ws.out("pkg/x.txt") == "plain\n"
    tool.chmod(0o755)
    run = ws.kiln("build", "//pkg:x", "--explain")
    assert run.executed == 1, run.err
    assert ws.out("pkg/x.txt") == "runnable\n"
    assert "input changed: pkg/tool.sh" in run.err


def test_writing_through_a_source_input_fails_naming_it_and_leaves_the_source(
    ws: Workspace,
) -> None:
    """A3: `echo x >> $<` appended to the source (a cmd even appended a target to a
    BUILD file), and the build succeeded."""
    ws.write(
        "pkg/BUILD",
        'genrule(name = "w", srcs = ["src.txt"], outs = ["w.txt"], '
        'cmd = "echo x >> $<; cat $< > $@")\n',
    )
    ws.write("pkg/src.txt", "source\n")
    run = ws.kiln("build", "//pkg:w")
    assert run.code == 1
    assert "pkg/src.txt: Read-only file system" in run.err
    assert (ws.root / "pkg/src.txt").read_text() == "source\n"


def test_without_the_sandbox_a_write_through_a_source_fails_naming_it(ws: Workspace) -> None:
    ws.write(
        "pkg/BUILD",
        'genrule(name = "w", srcs = ["src.txt"], outs = ["w.txt"], '
        'cmd = "echo x >> $<; cat $< > $@")\n',
    )
    ws.write("pkg/src.txt", "source\n")
    run = ws.kiln("build", "//pkg:w", "--nosandbox")
    assert run.code == 1
    assert "modified its input pkg/src.txt, a source file (inputs are read-only" in run.err


def test_an_undeclared_file_is_absent_even_by_absolute_path(ws: Workspace) -> None:
    """A4: an action read undeclared workspace files by absolute path (its input
    symlinks name the workspace)."""
    ws.write(
        "pkg/BUILD",
        'genrule(name = "peek", srcs = ["in.txt"], outs = ["peek.txt"], '
        'cmd = "d=$$(dirname $$(readlink $<)); ls $$d > $@; cat $$d/secret >> $@ || true")\n',
    )
    ws.write("pkg/in.txt", "declared\n")
    ws.write("pkg/secret", "undeclared\n")
    run = ws.kiln("build", "//pkg:peek")
    assert run.code == 0, run.err
    assert ws.out("pkg/peek.txt") == "in.txt\n"  # the workspace shows its declared file only


@pytest.mark.parametrize("absolute", [True, False], ids=["absolute", "relative"])
def test_a_source_that_is_a_symlink_is_read_through_it_in_the_sandbox(
    ws: Workspace, absolute: bool
) -> None:
    """Issue 20: a source symlink with an absolute target (data kept outside the workspace)
    failed the sandbox's set-up: the kernel resolved the target against the sandbox's
    root, where it leads nowhere. Its target's folder stays hidden all the same."""
    data = ws.root.parent / "data"
    data.mkdir()
    (data / "weights.txt").write_text("kept outside\n")
    (data / "other.txt").write_text("undeclared\n")
    ws.write(
        "pkg/BUILD",
        'genrule(name = "g", srcs = ["in.txt"], outs = ["g.txt"], '
        'cmd = "cat $< > $@; cat ' + str(data / "other.txt") + ' >> $@ 2>/dev/null || true")\n',
    )
    target = data / "weights.txt"
    (ws.root / "pkg/in.txt").symlink_to(target if absolute else "../../data/weights.txt")
    run = ws.kiln("build", "//pkg:g")
    assert run.code == 0, run.err
    assert ws.out("pkg/g.txt") == "kept outside\n"


def test_an_action_writes_only_its_execroot_and_a_private_tmp(ws: Workspace) -> None:
    """A4: an action could write anywhere, e.g. /tmp, or into the workspace."""
    host_tmp = ws.root.parent / "written-by-the-action"
    escape = f"echo x > {host_tmp} || true; echo y > {ws.root}/pkg/new || true"
    ws.write(
        "pkg/BUILD",
        f"""
genrule(name = "a", outs = ["a.txt"], cmd = "echo a > /tmp/mine; {escape}; ls -A /tmp > $@")
genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "ls -A /tmp > $@")
""",
    )
    run = ws.kiln("build", "//pkg:b")
    assert run.code == 0, run.err
    assert "mine" in ws.out("pkg/a.txt")
    assert "mine" not in ws.out("pkg/b.txt")  # each action's /tmp is its own
    assert not host_tmp.exists()
    assert not (ws.root / "pkg/new").exists()


def test_where_namespaces_are_refused_actions_run_unsandboxed_after_one_warning(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kiln.sandbox import client

    def refuse(python: str, config: object, *, detached: bool = False) -> client.Sandbox:
        raise client.SandboxUnavailable("unshare: Operation not permitted")

    monkeypatch.setattr(client.Sandbox, "start", staticmethod(refuse))
    ws.write(
        "pkg/BUILD",
        "".join(
            f'genrule(name = "g{i}", outs = ["g{i}.txt"], cmd = "echo {i} > $@")\n'
            for i in range(3)
        ),
    )
    run = ws.kiln("build", "//pkg:all")
    assert run.code == 0, run.err
    warnings = [line for line in run.err.splitlines() if line.startswith("WARNING:")]
    assert warnings == [
        "WARNING: actions run without a sandbox: unshare: Operation not permitted (user and "
        "mount namespaces are not available here); they can read undeclared files and write "
        "outside their execroot. --nosandbox says so without this warning"
    ]
    assert ws.out("pkg/g2.txt") == "2\n"
    ws.kiln("clean", "--expunge_disk_cache")
    quiet = ws.kiln("build", "//pkg:all", "--nosandbox")
    assert (quiet.executed, quiet.err.count("WARNING")) == (3, 0)


def test_a_kernel_that_refuses_namespaces_gets_a_plain_build_and_one_warning(
    ws: Workspace,
) -> None:
    """The fallback as a machine without user namespaces takes it: kiln runs in a user
    namespace whose max_user_namespaces is 0, so the kernel itself refuses the
    sandbox's unshare (ENOSPC), as on a container or kernel that allows none."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to make a namespace that allows none")
    refuse = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    probe = subprocess.run(
        ["unshare", "-U", "-r", "sh", "-c", refuse, "sh", "unshare", "-U", "true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode == 0 or b"No space left" not in probe.stderr:
        pytest.skip(f"cannot make a namespace that refuses namespaces here: {probe.stderr!r}")
    ws.write(
        "pkg/BUILD",
        'genrule(name = "peek", srcs = ["in.txt"], outs = ["peek.txt"], '
        'cmd = "d=$$(dirname $$(readlink $<)); ls $$d > $@")\n',
    )
    ws.write("pkg/in.txt", "declared\n")
    ws.write("pkg/other.txt", "undeclared\n")
    run = subprocess.run(
        ["unshare", "-U", "-r", "sh", "-c", refuse, "sh", *KILN, "build", "//pkg:peek"],
        cwd=ws.root,
        env=ws.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING:")]
    assert warnings == [
        "WARNING: actions run without a sandbox: unshare: No space left on device: the limit "
        "user.max_user_namespaces is reached or 0 (user and "
        "mount namespaces are not available here); they can read undeclared files and write "
        "outside their execroot. --nosandbox says so without this warning"
    ]
    # Unsandboxed, the whole package shows through the input's symlink.
    assert "other.txt" in ws.out("pkg/peek.txt").split()
