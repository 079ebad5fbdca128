"""One build at a time per workspace, as Bazel's output-base lock.

A second `kiln build` waits with a message (or fails at once with
--nolock_wait). The lock is an flock, so a killed kiln never leaves it held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator

from kiln.errors import KilnError
from kiln.layout import OutputBase


@contextlib.contextmanager
def workspace_lock(
    output_base: OutputBase, *, wait: bool, on_wait: Callable[[str], None]
) -> Iterator[None]:
    output_base.create()
    fd = os.open(output_base.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            if not wait:
                raise KilnError(
                    f"another kiln command (pid {holder}) holds the workspace lock",
                    hint="wait for it to finish, or drop --nolock_wait to wait automatically",
                ) from None
            on_wait(f"Another kiln command (pid {holder}) is running. Waiting for it to finish...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock
