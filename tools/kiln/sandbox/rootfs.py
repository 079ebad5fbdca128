"""Making a sandbox's root: a tmpfs holding only mount points, and the binds on them.

Used inside a user namespace (linux.enter_user_namespace), by two processes:
the server's child before it runs a command (base and action binds at once,
then pivot_root), and a worker's host, which keeps one root for its worker
and rebinds the action's part for each action (rebind). Every target is a
path of the sandbox; a Bind's source is a host path, reached through
`source_prefix` (a host root still open as a directory: /proc/self/fd/N)
once the host's root is no longer this process's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from kiln.sandbox import linux
from kiln.sandbox.view import Bind, SandboxConfig


def build_base(root: str, config: SandboxConfig) -> None:
    """Mount the tmpfs at `root` and show the toolchain, /dev, /proc and /sys in it, with an
    empty /tmp directory (private_tmp mounts one)."""
    linux.tmpfs(root)
    made = Made()  # the base stays as long as its root: nothing to undo
    for path in sorted(config.toolchain, key=_depth):
        if os.path.islink(path):
            _make_dir(root + os.path.dirname(path), made)
            with contextlib.suppress(FileExistsError):
                os.symlink(os.readlink(path), root + path)
        else:
            _bind(root, Bind(path, path), recursive=True, made=made)
    for name in ("dev", "proc"):
        _bind(root, Bind(f"/{name}", f"/{name}", writable=True), recursive=True, made=made)
    _bind(root, Bind("/sys", "/sys"), recursive=True, made=made)
    _make_dir(root + "/dev/shm", made)
    linux.tmpfs(root + "/dev/shm", "1777")  # not the host's shared memory
    _make_dir(root + "/tmp", made)


@dataclass
class Made:
    """What an action's part of a root added: mounts, and the mount points created for them
    in the root's own tmpfs (in order; undone in reverse)."""

    mounts: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)


def private_tmp(root: str, config: SandboxConfig, source_prefix: str, made: Made) -> None:
    """A fresh /tmp, with the toolchain parts that lie in /tmp and the config's binds in it."""
    linux.tmpfs(root + "/tmp", "1777")
    made.mounts.append(root + "/tmp")
    inside = [
        Bind(p, p) for p in config.toolchain if p.startswith("/tmp/") and not os.path.islink(p)
    ]
    mount_binds(root, [*inside, *config.binds], source_prefix, made)


def mount_binds(root: str, binds: Sequence[Bind], source_prefix: str, made: Made) -> None:
    """Bind each source on its target under root, shallowest target first."""
    for bind in sorted(binds, key=lambda b: _depth(b.target)):
        _bind(root, bind, source_prefix=source_prefix, made=made)
        made.mounts.append(root + bind.target)


def enter(root: str, cwd: str) -> None:
    """Make root the root of this mount namespace (the host's is detached), cwd its cwd."""
    linux.remount_readonly(root)  # only /tmp and the execroot stay writable
    os.chdir(root)
    linux.pivot_root(".", ".")
    linux.umount(".")  # the old root, stacked under the new one by pivot_root(".", ".")
    os.chdir(cwd)


def enter_keeping_host(root: str, hidden: str) -> int:
    """Make root the root, keeping the host's reachable only through the returned
    descriptor: it is moved to `hidden`, a directory of root, opened, and then covered
    by an empty read-only tmpfs, so no path leads to it."""
    _make_dir(root + hidden, Made())
    os.chdir(root)
    linux.pivot_root(".", "." + hidden)
    os.chdir("/")
    host = os.open(hidden, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    linux.tmpfs(hidden, "000")
    linux.remount_readonly(hidden)
    return host


def rebind(config: SandboxConfig, previous: Made, binds: Sequence[Bind], host: int) -> Made:
    """In a root entered with enter_keeping_host: undo what the previous action's part made,
    then make this action's (a fresh /tmp, its binds)."""
    for target in reversed(previous.mounts):
        with contextlib.suppress(OSError):
            linux.umount(target)
    linux.remount_readonly("/", readonly=False)  # room for new mount points
    try:
        for path in reversed(previous.created):  # no placeholder of an undeclared file stays
            with contextlib.suppress(OSError):
                os.rmdir(path) if os.path.isdir(path) else os.unlink(path)
        made = Made()
        prefix = f"/proc/self/fd/{host}"
        private_tmp("", config, prefix, made)
        mount_binds("", binds, prefix, made)
    finally:
        linux.remount_readonly("/")
    return made


def _bind(
    root: str, bind: Bind, *, made: Made, recursive: bool = False, source_prefix: str = ""
) -> None:
    target = root + bind.target
    source = source_prefix + bind.source
    if bind.writable and not os.path.lexists(source):
        # A writable directory of the user's that went (the disk cache's torch state,
        # with an expunged cache): made anew, as the action would have made it.
        os.makedirs(source, exist_ok=True)
    if not os.path.lexists(target):
        _make_dir(os.path.dirname(target), made)
        if os.path.isdir(source):
            os.mkdir(target)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o444))
        made.created.append(target)
    linux.bind(source, target, writable=bind.writable, recursive=recursive)


def _make_dir(path: str, made: Made) -> None:
    """mkdir -p, noting each directory created."""
    missing = []
    while path and not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        os.mkdir(directory, 0o755)
        made.created.append(directory)


def _link(path: str) -> bool:
    return os.path.islink(path)


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")
