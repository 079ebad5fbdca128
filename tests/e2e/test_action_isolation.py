"""No state crosses actions (issue 20): what one action leaves behind, another never sees.

Each case is a class of leak seen on main: a daemon a genrule starts with `setsid`
(it left the action's process group, outlived the build and rewrote a later
action's output, which was then cached), a model module that patches torch at
import (a persistent worker carried the patch into another target's weights).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kiln_workspace import Workspace

KILN = [sys.executable, "-m", "kiln"]

# The daemon keeps writing into its execroot, which kiln gives the next action (execroots
# are reused): `later` writes its output, waits, and kiln would collect the daemon's text.
DAEMON = """
genrule(
    name = "daemon",
    outs = ["daemon.pid"],
    cmd = "setsid sh -c 'while :; do echo tampered > \\"$$0/app/later.out\\" 2>/dev/null; "
    + "sleep 0.02; done' \\"$$PWD\\" </dev/null >/dev/null 2>&1 & echo $$! > $@",
)
genrule(
    name = "later",
    srcs = [":daemon"],
    outs = ["later.out"],
    cmd = "echo fine > $@; sleep 1",
)
"""


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandbox", "nosandbox"])
def test_a_daemon_a_genrule_starts_is_killed_with_it_and_never_touches_a_later_output(
    ws: Workspace, sandbox: bool
) -> None:
    ws.write("app/BUILD", DAEMON)
    flags = ["--jobs=1", *([] if sandbox else ["--nosandbox"])]
    run = ws.kiln("build", "//app:later", *flags)
    daemon = int(ws.out("app/daemon.pid"))
    try:
        assert run.code == 0, run.err
        assert not running(daemon), "the genrule's setsid daemon outlived its action"
        assert ws.out("app/later.out") == "fine\n"
    finally:
        if running(daemon):
            os.kill(daemon, 9)
