"""Where packaging keeps torch's temp state: per user, under kiln's cache, at a path every
machine shares.

Inductor writes precompiled headers under $TMPDIR and names that path in the
sources it generates, and embeds its cache directory too: so the paths must
be the same on every machine and for every user, or packages differ byte for
byte. They used to be fixed world-writable paths (/tmp/kiln-torch-tmp,
/tmp/kiln-inductor-<name>), shared by every kiln on the host, never collected,
and open to another user creating them first.

kiln sets $KILN_TORCH_TMP for every Python action (exec/sandboxing.py):

    sandboxed   /tmp/kiln-torch-tmp, in the action's private /tmp, so the same path
                everywhere; the private caches beside it live in that private /tmp.
                The disk cache's tmp/torch is bound read-only at $KILN_TORCH_STORE:
                its precompiled headers are linked in (header_store.py)
    otherwise   <disk cache>/tmp/torch itself, per user: packages embed it, and so
                differ between users and machines (docs/remote-cache.md)

Run without kiln (Bazel runs the same action modules), it is the sandbox's
fixed path, /tmp/kiln-torch-tmp, with the private caches beside it: Bazel's
packages must be byte for byte kiln's (tests/e2e/bazel/test_bazel_conformance.py).
There the path is predictable, so it is checked before use: a directory of
this user's, mode 0700, not a symlink; the lock files are opened without
following links. Another user's, or a link, is an error naming it, never used.
The disk cache's garbage collection bounds what lies in kiln's (cache/gc.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kiln.actions import header_store
from kiln.actions.errors import ActionError

# Read here, set by the executor (kiln.exec.sandboxing: the same name, pinned by a test).
TORCH_TMP_ENV = "KILN_TORCH_TMP"


# Where torch's state is in kiln's sandbox (exec/sandboxing.py: the same string, pinned by
# a test) and under another build tool.
FIXED_TORCH_TMP = "/tmp/kiln-torch-tmp"


def shared_dir() -> Path:
    """The directory packaging actions share (precompiled headers): $KILN_TORCH_TMP."""
    return Path(os.environ.get(TORCH_TMP_ENV) or FIXED_TORCH_TMP)


def _own_directory(path: Path) -> None:
    """Make `path` (mode 0700) or check that it is this user's directory, not a link."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        what = "a symlink" if stat.S_ISLNK(found.st_mode) else "not a directory of this user's"
        raise ActionError(
            f"torch's temp state {path} is {what}",
            hint="remove it (another user or program made it first), or build with kiln",
        )


def private_cache_dir(name: str) -> Path:
    """The private cache of one packaging, named after what it compiles: beside the shared
    directory (in a sandbox: in the action's own /tmp, /tmp/kiln-inductor-<name>)."""
    return shared_dir().parent / f"kiln-inductor-{name}"


@contextlib.contextmanager
def private_cache(name: str) -> Iterator[Path]:
    """private_cache_dir(name), emptied, held under an flock while in use (two packagings
    of one program outside a sandbox share the name)."""
    base = private_cache_dir(name)
    base.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(f"{base}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.fstat(lock).st_uid != os.getuid():
            raise ActionError(
                f"torch's temp state {base}.lock is another user's",
                hint="remove it (another user made it first), or build with kiln",
            )
        if base.is_symlink():
            base.unlink()
        shutil.rmtree(base, ignore_errors=True)
        _own_directory(base)
        yield base
        shutil.rmtree(base, ignore_errors=True)
    finally:
        os.close(lock)


# Held shared (flock LOCK_SH) in the shared directory by every process that uses it, for
# as long as it lives (a worker: its build): `kiln clean --expunge_disk_cache` from another
# workspace then leaves the directory to it instead of deleting a running compile's files
# (cache/gc.py: the same name, pinned by a test).
IN_USE_LOCK = ".in-use.lock"
_in_use: list[int] = []  # this process's descriptor of it, once taken


def _hold_in_use(shared: Path, *, read_only: bool = False) -> None:
    if _in_use:
        return
    if read_only:  # the sandbox's store: kiln made the file before any action ran
        try:
            fd = os.open(shared / IN_USE_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return
    else:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(shared / IN_USE_LOCK, flags, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _in_use.append(fd)


def pin_temp_dirs() -> None:
    """$TMPDIR and inductor's precompiled-header folder at the shared directory: inductor
    computes the latter once, when torch._inductor.codecache is imported, and names it in
    the sources it generates (a per-action $TMPDIR would make every package differ); and
    torch's and Python's folders named through links there (toolchain_paths.py)."""
    shared = shared_dir()
    _own_directory(shared)
    # In kiln's sandbox the disk cache's torch state is a read-only store, the shared
    # directory the action's own (actions/header_store.py).
    store = os.environ.get(header_store.STORE_ENV)
    _hold_in_use(Path(store) if store else shared, read_only=bool(store))
    os.environ["TMPDIR"] = str(shared)
    tempfile.tempdir = None
    from torch._inductor import codecache

    from kiln.actions import toolchain_paths

    codecache._HEADER_DIR = str(shared / header_store.HEADERS)
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
    if store:
        published = Path(store) / header_store.PUBLISHED
        header_store.link_store(published, shared / header_store.HEADERS)
        requests = os.environ.get(header_store.REQUESTS_ENV)
        replies = os.environ.get(header_store.REPLIES_ENV)
        if requests and replies:
            header_store.ask_for_misses(requests, replies, published)
    toolchain_paths.pin(shared)
