"""tools/debian_packages.sh: the Debian packages the tests need, installed by the scripts
that need them (bazel.sh, nginx_cache.sh, buildgrid.sh, chromium.sh, windows_toolchain.sh).

Two suites started at once on a fresh machine install the same packages at once; a
second apt-get then failed on dpkg's lock and took its suite down. Here apt-get is a fake
that fails as dpkg does when another one is running (KILN_APT_GET).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# Fails like apt-get on a held dpkg lock while another instance runs; holds it a while.
FAKE_APT_GET = """#!/usr/bin/env bash
state=$(dirname "$0")
mkdir "$state/running" 2>/dev/null || {
    echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2
    exit 100
}
echo "$*" >>"$state/calls"
sleep 0.4
rmdir "$state/running"
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="debian_install runs as root")


def _install(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "KILN_APT_GET": str(tmp_path / "apt-get"),
        "KILN_DEBIAN_LOCK": str(tmp_path / "install.lock"),
    }
    script = f'. {REPO}/tools/debian_packages.sh && debian_install "$@"'
    return subprocess.Popen(
        ["bash", "-c", script, "debian_install", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _fake_apt_get(tmp_path: Path) -> None:
    fake = tmp_path / "apt-get"
    fake.write_text(FAKE_APT_GET)
    fake.chmod(0o755)


def test_installs_started_at_once_wait_for_one_another(tmp_path: Path) -> None:
    _fake_apt_get(tmp_path)
    installs = [_install(tmp_path, "bazel", "bazel-bootstrap") for _ in range(4)]
    results = [(p.wait(timeout=60), p.stderr.read() if p.stderr else "") for p in installs]
    assert results == [(0, "")] * 4
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 4  # each one install, none failed over to `update`
    assert all("DPkg::Lock::Timeout=" in c and "bazel-bootstrap" in c for c in calls)


def test_without_apt_get_it_says_what_is_missing_and_fails(tmp_path: Path) -> None:
    install = _install(tmp_path / "nowhere", "nginx", "nginx")
    assert install.wait(timeout=30) == 1
    assert install.stderr is not None
    assert install.stderr.read() == (
        "nginx is missing, and this is no Debian system (no apt-get): install nginx\n"
    )
