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
        "KILN_POLICY_RC_D": str(tmp_path / "policy-rc.d"),
    }
    script = f'. {REPO}/tools/debian_packages.sh && debian_install "$@"'
    return subprocess.Popen(
        ["bash", "-c", script, "debian_install", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _fake_apt_get(tmp_path: Path, script: str = FAKE_APT_GET) -> None:
    fake = tmp_path / "apt-get"
    fake.write_text(script)
    fake.chmod(0o755)


def test_installs_started_at_once_wait_for_one_another(tmp_path: Path) -> None:
    _fake_apt_get(tmp_path)
    installs = [_install(tmp_path, "bazel", "bazel-bootstrap") for _ in range(4)]
    results = [(p.wait(timeout=60), p.stderr.read() if p.stderr else "") for p in installs]
    assert results == [(0, "")] * 4
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 4  # each one install, none failed over to `update`
    assert all("DPkg::Lock::Timeout=" in c and "bazel-bootstrap" in c for c in calls)


# Records what invoke-rc.d would be told while the packages install: policy-rc.d's exit
# status (101: "starting a service is not allowed"), or "none".
POLICY_RECORDING_APT_GET = """#!/usr/bin/env bash
policy=$(dirname "$0")/policy-rc.d
if [ -x "$policy" ]; then "$policy" nginx start; echo $? >>"$(dirname "$0")/policy"
else echo none >>"$(dirname "$0")/policy"; fi
"""


def test_no_services_forbids_starting_services_during_the_install_only(tmp_path: Path) -> None:
    _fake_apt_get(tmp_path, POLICY_RECORDING_APT_GET)
    install = _install(tmp_path, "--no-services", "nginx", "nginx")
    assert install.wait(timeout=30) == 0
    assert (tmp_path / "policy").read_text() == "101\n"
    assert not (tmp_path / "policy-rc.d").exists()


def test_services_may_start_without_no_services(tmp_path: Path) -> None:
    _fake_apt_get(tmp_path, POLICY_RECORDING_APT_GET)
    assert _install(tmp_path, "nginx", "nginx").wait(timeout=30) == 0
    assert (tmp_path / "policy").read_text() == "none\n"


def test_no_services_keeps_a_policy_the_machine_already_has(tmp_path: Path) -> None:
    _fake_apt_get(tmp_path, POLICY_RECORDING_APT_GET)
    owners = tmp_path / "policy-rc.d"
    owners.write_text("#!/bin/sh\nexit 0\n")
    owners.chmod(0o755)
    assert _install(tmp_path, "--no-services", "nginx", "nginx").wait(timeout=30) == 0
    assert (tmp_path / "policy").read_text() == "0\n"
    assert owners.read_text() == "#!/bin/sh\nexit 0\n"


def test_without_apt_get_it_says_what_is_missing_and_fails(tmp_path: Path) -> None:
    install = _install(tmp_path / "nowhere", "nginx", "nginx")
    assert install.wait(timeout=30) == 1
    assert install.stderr is not None
    assert install.stderr.read() == (
        "nginx is missing, and this is no Debian system (no apt-get): install nginx\n"
    )
