"""The Linux system calls a sandbox is made of: namespaces, mounts, a new root.

Python 3.11 has no os.unshare and no os.mount, so they are called through
ctypes from libc (resolved once, at import). Every wrapper raises OSError
with the errno and what it was doing, like the os module does. Only the
calls used by kiln.sandbox are here; they are Linux-only, and importing this
module elsewhere raises OSError (the caller then runs without a sandbox).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2


def _load_libc() -> ctypes.CDLL:
    """glibc's soname first: find_library runs ldconfig in a subprocess, which cost
    every sandbox host's start about 25 ms."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # another C library (musl)
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


_libc = _load_libc()
_unshare = _libc.unshare
_unshare.argtypes = (ctypes.c_int,)
_mount = _libc.mount
_mount.argtypes = (
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
)
_umount2 = _libc.umount2
_umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
_pivot_root = _libc.pivot_root
_pivot_root.argtypes = (ctypes.c_char_p, ctypes.c_char_p)


def _check(result: int, what: str, path: str | None = None) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}", path)


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


# What the kernel's refusals of a user namespace mean (unshare(2)), for the warning.
_UNSHARE_HINTS = {
    errno.ENOSPC: "the limit user.max_user_namespaces is reached or 0",
    errno.EPERM: "unprivileged user namespaces are off: kernel.unprivileged_userns_clone, "
    "an AppArmor or seccomp policy",
    errno.EINVAL: "this kernel has no user namespaces",
}


def unshare(flags: int) -> None:
    if _unshare(flags) != 0:
        number = ctypes.get_errno()
        hint = _UNSHARE_HINTS.get(number)
        text = os.strerror(number) + (f": {hint}" if hint else "")
        raise OSError(number, f"unshare: {text}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data or None)),
        f"mount {source or fstype} on {target}",
        target,
    )


def umount(target: str) -> None:
    """Detach the mount at target (lazily: what an action left open keeps it alive)."""
    _check(_umount2(_bytes(target), MNT_DETACH), f"umount {target}", target)


def pivot_root(new_root: str, put_old: str) -> None:
    _check(_pivot_root(_bytes(new_root), _bytes(put_old)), "pivot_root", new_root)


def bind(source: str, target: str, *, writable: bool, recursive: bool = False) -> None:
    """Bind source on target; read-only unless writable (a second, remounting call: a bind
    mount takes its own flags only so)."""
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if not writable:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def tmpfs(target: str, mode: str = "755") -> None:
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}")


def remount_readonly(target: str, readonly: bool = True) -> None:
    """Make the tmpfs at target read-only (or writable again)."""
    flags = MS_REMOUNT | MS_NOSUID | MS_NODEV | (MS_RDONLY if readonly else 0)
    mount(None, target, None, flags)


def enter_user_namespace() -> None:
    """Become root of a new user namespace with a private mount namespace, as
    `unshare --user --map-root-user --mount` does: the caller's uid and gid map to 0,
    so files it creates are still the caller's outside. The process must be
    single-threaded (the kernel refuses otherwise)."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER | CLONE_NEWNS)
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")
    # Nothing mounted here may propagate back to the host.
    mount(None, "/", None, MS_REC | MS_PRIVATE)
