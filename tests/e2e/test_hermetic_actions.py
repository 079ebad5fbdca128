"""Hermetic actions (issue 11 A3, A4): an action sees its declared inputs, read-only, and
the toolchain; its key holds every input's executable bit."""

from __future__ import annotations

from tests.e2e.harness import Workspace


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
