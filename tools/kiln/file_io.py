"""kiln's own file I/O at the edges: the user's text files read without hanging, and
errors that name their file.

Reading the user's text files (BUILD, .bzl, WORKSPACE, locks, rc files):

`Path.read_text` opens whatever the name leads to and reads to its end. For a
FIFO that open blocks until a writer comes (loading hung for ever), and a
character device such as /dev/zero never ends (kiln read until the kernel killed
it). kiln's inputs are regular files, so anything else is refused at open, before
a byte is read, as an OSError whose strerror says what stands there: the callers
already turn an OSError into a one-line error naming the file, and keep doing so.
The open is non-blocking so that a FIFO cannot stall it; the size is bounded so
that a regular file of absurd size (a model checkpoint named BUILD) is refused
instead of read into memory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

# Far above any real BUILD file, lock or rc file (the largest lock seen: 200 KB).
MAX_TEXT_BYTES = 64 * 1024 * 1024

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotARegularFile(OSError):
    """A name that leads to something other than a regular file (or directory)."""


def read_text(path: str | os.PathLike[str]) -> str:
    """The file's text (UTF-8; UnicodeDecodeError as read_text raises it). OSError for a
    missing or unreadable file as open() raises it, IsADirectoryError for a directory,
    NotARegularFile for a FIFO, device or socket, or a file over MAX_TEXT_BYTES."""
    name = os.fspath(path)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd)
        if stat.S_ISDIR(mode.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
        for is_kind, kind in _KINDS:
            if is_kind(mode.st_mode):
                raise NotARegularFile(
                    errno.EINVAL, f"it is {kind}, not a regular file (replace it with one)", name
                )
        if mode.st_size > MAX_TEXT_BYTES:
            raise NotARegularFile(
                errno.EFBIG,
                f"it is {mode.st_size} bytes, more than a text file kiln reads "
                f"({MAX_TEXT_BYTES} at most): is it the file you meant?",
                name,
            )
        with os.fdopen(fd, "rb", closefd=True) as file:
            fd = -1
            data = file.read(MAX_TEXT_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    return data.decode("utf-8")


@contextlib.contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """An OSError raised inside that names no file gets `path`.

    write() on a descriptor raises ENOSPC naming nothing, so a full disk while
    kiln saved its own state escaped the CLI's net (cli/os_errors.py turns only an
    error that names its path into a one-line error) as an internal error."""
    try:
        yield
    except OSError as error:
        if error.filename is None:
            error.filename = os.fspath(path)
        raise
