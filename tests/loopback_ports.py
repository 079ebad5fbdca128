"""Loopback ports for the servers the tests start, and whose server answers on one.

    port = free_port()                   free now; the server binds it later
    owns_port(server.pid, port)          a process of `server`'s own tree listens there

`free_port()` then starting a server is a race: another process (the other
suite on a loaded machine) can take the port in between. A server that then
fails to bind may keep running, and "something answers on the port" is then
another suite's server: a test would build against it (seen: one suite's kiln
on the other's Ray cluster). So a fixture waits until the process *it* started
(or one of that process's descendants) holds a listening socket on the port,
read from /proc: the socket's inode in /proc/net/tcp{,6} in state LISTEN, and
the same inode among the process's file descriptors.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from kiln.process_tree import descendants

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


def free_port() -> int:
    """A loopback port no one holds now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == _LISTEN and int(local.rpartition(":")[2], 16) == port:
                    inodes.add(inode)
    return inodes


def owns_port(root: int, port: int) -> bool:
    """Whether process `root` or one of its descendants listens on `port`."""
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    for pid in [root, *descendants(root)]:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:[") and target[8:-1] in inodes:
                        return True
    return False
