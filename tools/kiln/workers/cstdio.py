"""The C library's stdout buffer, set for each action as a fresh interpreter would have it.

Output that C and C++ code writes through stdio (printf, std::cout) waits in
the C library's buffer for stdout. In a fresh `python -m` whose fd 1 is a
file that buffer is a full one of the file's block size (at most BUFSIZ,
glibc's rule), flushed at exit, after Python's own streams (but before them
when the module ends in an exception, SystemExit included); under
PYTHONUNBUFFERED the interpreter turns it off at start-up. A worker set its C
stdout once, from its own environment, so each action sets it again for the
file now on fd 1 and flushes it before fd 1 goes back. C stderr is unbuffered
in both cases and needs nothing.

Where the C library is not glibc-like (no `stdout` symbol) only the flush is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from typing import Any

_IOFBF, _IOLBF, _IONBF = 0, 1, 2  # glibc's setvbuf modes
_BUFSIZ = 8192


class CStdout:
    def __init__(self) -> None:
        self._fflush: Any = None
        self._setvbuf: Any = None
        self._stream: ctypes.c_void_p | None = None
        try:
            libc = ctypes.CDLL(None)
            self._fflush = libc.fflush
            self._fflush.argtypes = [ctypes.c_void_p]
            setvbuf = libc.setvbuf
            setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
            self._stream = ctypes.c_void_p.in_dll(libc, "stdout")
            self._setvbuf = setvbuf
        except (OSError, ValueError, AttributeError):
            pass  # no C library to reach, or no `stdout` symbol in it

    def flush(self) -> None:
        """Write out every C stdio buffer (fflush(NULL))."""
        if self._fflush is not None:
            self._fflush(None)

    def flush_stdout(self) -> None:
        """Write out C stdout, as the interpreter does before it reports an uncaught exception."""
        if self._fflush is not None:
            self._fflush(self._stream.value if self._stream is not None else None)

    @contextlib.contextmanager
    def fresh(self, *, unbuffered: bool) -> Iterator[None]:
        """C stdout buffered for the file now on fd 1 while the block runs, flushed after."""
        self.flush()  # nothing of the worker's own may be left in the buffer
        buffer = None
        if self._setvbuf is not None and self._stream is not None:
            if unbuffered:
                self._setvbuf(self._stream.value, None, _IONBF, 0)
            else:
                size = os.fstat(1).st_blksize
                size = size if 0 < size < _BUFSIZ else _BUFSIZ
                buffer = ctypes.create_string_buffer(size)
                mode = _IOLBF if os.isatty(1) else _IOFBF
                self._setvbuf(self._stream.value, buffer, mode, size)
        try:
            yield
        finally:
            self.flush()
            if buffer is not None:
                # Let go of the buffer before it is freed; the next action sets its own.
                self._setvbuf(self._stream.value if self._stream else None, None, _IONBF, 0)
