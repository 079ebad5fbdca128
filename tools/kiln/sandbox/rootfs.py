"""Making a sandbox's root: a tmpfs holding only mount points, and the binds on them.

Used inside a user namespace (linux.enter_user_namespace) by a sandbox host
(host.py), which builds the base once (build_base), makes it its root
keeping the host's reachable through a descriptor (enter_keeping_host), and
remakes the action's part for each action (rebind). Every target is a path
of the sandbox; a Bind's source is a host path, reached through
`source_prefix` (the host's root still open as a directory: /proc/self/fd/N)
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
    """Mount the tmpfs at `root` and show the toolchain, /dev, /proc and /sys in it, with the
    mount points of /tmp and of the scratch directories (rebind mounts them)."""
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
    for directory in config.scratch:
        if not _within(directory, "/tmp") and not os.path.lexists(root + directory):
            _make_dir(root + directory, made)


@dataclass
class Made:
    """What an action's part of a root added: the mounts to undo (those no other of them
    holds: a lazy unmount takes what is below), and the mount points created for them in
    the root's own tmpfs (in order; undone in reverse)."""

    mounts: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)


def enter_keeping_host(root: str, hidden: str) -> int:
    """Make root the root, keeping the host's reachable only through the returned
    descriptor: it is moved to `hidden`, a directory of root, opened, and then covered
    by an empty read-only tmpfs, so no path leads to it. The root is read-only after."""
    _make_dir(root + hidden, Made())
    os.chdir(root)
    linux.pivot_root(".", "." + hidden)
    os.chdir("/")
    host = os.open(hidden, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    linux.tmpfs(hidden, "000")
    linux.remount_readonly(hidden)
    linux.remount_readonly("/")
    return host


def rebind(config: SandboxConfig, previous: Made, binds: Sequence[Bind], host: int) -> Made:
    """In a root entered with enter_keeping_host: undo what the previous action's part made,
    then make this action's: a fresh /tmp (with the config's binds), a fresh tmpfs on each
    scratch directory (the workspace, the execroots), then `binds`. Their mount points
    all lie in those fresh tmpfs, so the read-only root is left as it is, unless a
    target lies elsewhere (a workspace inside a toolchain directory, say)."""
    for target in reversed(previous.mounts):
        with contextlib.suppress(OSError):
            linux.umount(target)
    prefix = f"/proc/self/fd/{host}"
    made = Made()
    fresh = sorted(dict.fromkeys(["/tmp", *config.scratch]), key=_depth)
    outside = [b for b in binds if not any(_within(b.target, d) for d in fresh)]
    touch_root = bool(outside or previous.created)
    if touch_root:
        linux.remount_readonly("/", readonly=False)  # room for mount points
    try:
        for path in reversed(previous.created):  # no placeholder of an undeclared file stays
            with contextlib.suppress(OSError):
                os.rmdir(path) if os.path.isdir(path) else os.unlink(path)
        for directory in fresh:
            _fresh_tmpfs(directory, config, prefix, made)
        inside_tmp = [b for b in config.binds if _within(b.target, "/tmp")]
        _mount_binds("", inside_tmp, prefix, made, roots=[])
        _mount_binds("", binds, prefix, made, roots=[b.target for b in outside])
    finally:
        if touch_root:
            linux.remount_readonly("/")
    return made


def _fresh_tmpfs(directory: str, config: SandboxConfig, prefix: str, made: Made) -> None:
    """A new tmpfs on `directory`, showing again what of the toolchain lies in it."""
    if _within(directory, "/tmp") and directory != "/tmp":
        os.makedirs(directory, 0o755, exist_ok=True)  # in this action's own /tmp
    else:
        made.mounts.append(directory)
    linux.tmpfs(directory, "1777" if directory == "/tmp" else "755")
    # A toolchain folder that is gone is not shown: a disk cache's python-envs/ expunged
    # by another workspace while this build runs (kiln clean --expunge_disk_cache), made
    # again by the next action that needs an environment.
    inside = [
        Bind(p, p)
        for p in config.toolchain
        if _within(p, directory)
        and p != directory
        and not os.path.islink(p)
        and os.path.exists(prefix + p)
    ]
    _mount_binds("", inside, prefix, made, roots=[])


def _mount_binds(
    root: str, binds: Sequence[Bind], source_prefix: str, made: Made, roots: Sequence[str]
) -> None:
    """Bind each source on its target under root, shallowest target first; the targets in
    `roots` are noted as mounts to undo (the others go with the tmpfs holding them)."""
    for bind in sorted(binds, key=lambda b: _depth(b.target)):
        _bind(root, bind, source_prefix=source_prefix, made=made)
        if bind.target in roots:
            made.mounts.append(root + bind.target)


def _bind(
    root: str, bind: Bind, *, made: Made, recursive: bool = False, source_prefix: str = ""
) -> None:
    target = root + bind.target
    source = _on_host(source_prefix, bind.source) if source_prefix else bind.source
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


# As the kernel's own bound on a path's links (ELOOP past it).
_MAX_LINKS = 40


def _on_host(prefix: str, path: str) -> str:
    """`path` of the host, reached through `prefix` (the host's root as /proc/self/fd/N),
    with every symlink on the way resolved against the host's root: the kernel would
    resolve an absolute link target (a source file linked to /data/x) against this
    process's root, the sandbox's, where it leads nowhere. A relative target stays
    relative, as it is. A dangling link or a loop gives a path that does not exist,
    and the bind fails naming it."""
    resolved = ""  # the host path so far, free of links
    parts = [p for p in path.split("/") if p]
    links = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = f"{resolved}/{part}"
        if links < _MAX_LINKS and os.path.islink(prefix + candidate):
            links += 1
            link = os.readlink(prefix + candidate)
            if link.startswith("/"):
                resolved = ""
            parts = [p for p in link.split("/") if p] + parts
            continue
        resolved = candidate
    return prefix + (resolved or "/")


def _make_dir(path: str, made: Made) -> None:
    """mkdir -p, noting each directory created."""
    missing = []
    while path and not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        os.mkdir(directory, 0o755)
        made.created.append(directory)


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")
