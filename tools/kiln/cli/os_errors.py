"""The file system in kiln's way: an OSError about a path is the user's to fix, not a bug.

Places that can name the problem better (the output base, kiln-out/, an
output, --profile) raise a KilnError of their own; this is the net under
them, so a permission denied anywhere is one line naming the path, exit 1,
never a traceback (--verbose_failures adds it).
"""

from __future__ import annotations

import errno
import traceback

from kiln.errors import KilnError

_ACCESS = (
    "kiln needs to read the workspace, and to write kiln-out/, the output base and the "
    "disk cache: fix the permissions, or list a workspace directory in .kilnignore"
)
_NO_SPACE = "free some space (kiln clean --expunge_disk_cache, or --disk_cache_max_size=SIZE)"
_HINTS = {
    errno.EACCES: _ACCESS,
    errno.EPERM: _ACCESS,
    errno.ENOTDIR: "a file stands where kiln needs a directory: remove it",
    errno.EISDIR: "a directory stands where kiln writes a file: remove it",
    errno.EEXIST: "a file stands where kiln needs a directory: remove it",
    errno.ENOSPC: _NO_SPACE,
    errno.EDQUOT: _NO_SPACE,
    errno.EROFS: "kiln writes kiln-out/, the output base and the disk cache: "
    "put them on a writable file system (--output_base, --disk_cache)",
    errno.ELOOP: "a symlink loop: remove or fix the link",
}


def environment_error(error: OSError) -> KilnError | None:
    """The KilnError for an OSError the file system caused, or None (then it is a bug)."""
    hint = _HINTS.get(error.errno or 0)
    if hint is None or not error.filename:
        return None
    path = error.filename if not error.filename2 else f"{error.filename} -> {error.filename2}"
    return KilnError(
        f"{path}: {error.strerror}",
        hint=hint,
        details="".join(traceback.format_exception(error)),
    )
