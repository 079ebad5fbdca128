"""The test servers' port check: a port counts as a fixture's only when a process of the
fixture's own tree listens on it, not when anything answers there (another suite's server
on a loaded machine did)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.loopback_ports import free_port, owns_port

# A child that listens on the port it is given (in a grandchild: a descendant counts),
# prints "up", then waits for its stdin to close.
SERVER = """
import socket, subprocess, sys
if sys.argv[2] == "fork":
    subprocess.run([*sys.orig_argv[:3], sys.argv[1], "listen"])
    sys.exit()
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("up", flush=True)
sys.stdin.read()
"""


def _serve(port: int, how: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "up\n"
    return process


def _end(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    process.wait(30)


def test_a_port_the_process_or_its_descendant_listens_on_is_its_own() -> None:
    for how in ("listen", "fork"):
        port = free_port()
        server = _serve(port, how)
        try:
            assert owns_port(server.pid, port)
        finally:
            _end(server)


def test_a_port_another_process_listens_on_is_not_the_fixtures() -> None:
    port = free_port()
    other = _serve(port, "listen")
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # "something answers on the port" holds, and is not the fixture's server
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert not owns_port(ours.pid, port)
    finally:
        ours.kill()
        ours.wait()
        _end(other)


def test_a_port_no_one_listens_on_is_no_ones() -> None:
    assert not owns_port(os.getpid(), free_port())
