"""Where packaging keeps torch's temp state: per user, under kiln's cache, at a path every
machine shares.

Inductor writes precompiled headers under $TMPDIR and names that path in the
sources it generates, and embeds its cache directory too: so the paths must
be the same on every machine and for every user, or packages differ byte for
byte. They used to be fixed world-writable paths (/tmp/kiln-torch-tmp,
/tmp/kiln-inductor-<name>), shared by every kiln on the host, never collected,
and open to another user creating them first.

kiln sets $KILN_TORCH_TMP for every Python action (exec/sandboxing.py):

    sandboxed   /tmp/kiln-torch-tmp, in the action's private /tmp: the disk cache's
                tmp/torch bound there, so the same path everywhere; the private
                caches beside it live in that private /tmp
    otherwise   <disk cache>/tmp/torch itself, per user: packages embed it, and so
                differ between users and machines (docs/remote-cache.md)

Run without kiln (a test, another build tool), it is <cache home>/kiln/tmp/torch:
still per user, never a predictable path that others can write. The disk
cache's garbage collection bounds what lies there (cache/gc.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Read here, set by the executor (kiln.exec.sandboxing: the same name, pinned by a test).
TORCH_TMP_ENV = "KILN_TORCH_TMP"


def shared_dir() -> Path:
    """The directory packaging actions share (precompiled headers): $KILN_TORCH_TMP."""
    named = os.environ.get(TORCH_TMP_ENV)
    if named:
        return Path(named)
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "kiln" / "tmp" / "torch"


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
    lock = os.open(f"{base}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(mode=0o700)
        yield base
        shutil.rmtree(base, ignore_errors=True)
    finally:
        os.close(lock)


def pin_temp_dirs() -> None:
    """$TMPDIR and inductor's precompiled-header folder at the shared directory: inductor
    computes the latter once, when torch._inductor.codecache is imported, and names it in
    the sources it generates (a per-action $TMPDIR would make every package differ)."""
    shared = shared_dir()
    shared.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.environ["TMPDIR"] = str(shared)
    tempfile.tempdir = None
    from torch._inductor import codecache

    codecache._HEADER_DIR = str(shared / "precompiled_headers")
