"""Rust panics inside starlark-rust, caught as an exception kiln can report.

starlark-rust panics where it should fail: `[0] * 2000000000` asks for a list
over 4 GiB and stops at "AlignedSize must not exceed u32::MAX" (issue 11,
B10). pyo3 turns the panic into PanicException, which derives from
BaseException, so it escaped kiln's error handling with a traceback; and
before that, Rust's panic hook had written its message (and with
RUST_BACKTRACE set, a backtrace) straight to file descriptor 2.

So every call into starlark runs inside `calls_into_starlark()`: fd 2 points
at a scratch file meanwhile (a few system calls), a PanicException becomes
StarlarkPanic with the hook's message, and whatever else landed in the file
is copied back to stderr afterwards. Nested calls (a .bzl file loaded from
a BUILD file's evaluation) share the outermost redirection.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO

# How Rust's panic hook starts: "\nthread '<unnamed>' (6951) panicked at src/x.rs:1:2:\n"
_PANIC_HOOK = re.compile(rb"\n?^thread '[^'\n]*'(?: \(\d+\))? panicked at ", re.MULTILINE)


class StarlarkPanic(Exception):
    """starlark-rust panicked; `message` is what its panic said."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _Redirect:
    depth = 0  # calls into starlark under way on the main thread
    scratch: BinaryIO | None = None
    pid = 0


@contextlib.contextmanager
def calls_into_starlark() -> Iterator[None]:
    """Run starlark with its panics caught (see the module docstring)."""
    # Only the main thread moves fd 2 (loading runs there; a location looked up
    # for an error from another thread keeps the real stderr).
    main = threading.current_thread() is threading.main_thread()
    outermost = main and _Redirect.depth == 0
    if outermost:
        scratch = _scratch()
        saved = os.dup(2)
        os.dup2(scratch.fileno(), 2)
        # The hook's text is thrown away, so a backtrace is wasted work; short of
        # memory, capturing one has hung the process on a lock.
        backtrace = os.environ.get("RUST_BACKTRACE")
        os.environ["RUST_BACKTRACE"] = "0"
    _Redirect.depth += main
    try:
        yield
    except BaseException as error:
        if _is_panic(error):
            error.__traceback__ = None  # its frames hold the failed run's values
            raise StarlarkPanic(str(error)) from None
        raise
    finally:
        _Redirect.depth -= main
        if outermost:
            _restore(saved, scratch)
            if backtrace is None:
                del os.environ["RUST_BACKTRACE"]
            else:
                os.environ["RUST_BACKTRACE"] = backtrace


def _is_panic(error: BaseException) -> bool:
    # pyo3_runtime.PanicException cannot be imported by name.
    return type(error).__name__ == "PanicException"


def _scratch() -> BinaryIO:
    # One per process: a forked loader (loading/parallel.py) must not share the offset.
    if _Redirect.scratch is None or _Redirect.pid != os.getpid():
        _Redirect.scratch = tempfile.TemporaryFile(prefix="kiln-stderr-")  # noqa: SIM115 (kept open)
        _Redirect.pid = os.getpid()
    return _Redirect.scratch


def _restore(saved: int, scratch: BinaryIO) -> None:
    """Point fd 2 back at stderr, and copy there what was written but a panic hook's text."""
    os.dup2(saved, 2)
    os.close(saved)
    size = os.fstat(scratch.fileno()).st_size
    if not size:
        return
    written = os.pread(scratch.fileno(), size, 0)
    os.ftruncate(scratch.fileno(), 0)
    os.lseek(scratch.fileno(), 0, os.SEEK_SET)
    hook = _PANIC_HOOK.search(written)
    if hook is not None:
        written = written[: hook.start()]
    view = memoryview(written)
    while view:
        view = view[os.write(2, view) :]


def release_failed_run() -> None:
    """Free what a panicked run left, before panicking_line() runs its statements again:
    a panic is often "out of memory", which the search must not meet earlier than the
    run did. Its values live on in reference cycles through the exception's frames."""
    gc.collect()


def describe(message: str) -> str:
    """A panic's message in a BUILD author's words."""
    if "AlignedSize must not exceed" in message or message == "len overflow":
        return f"a value too large for Starlark: over 4 GiB (starlark-rust: {message})"
    if "out of memory" in message:
        return f"Starlark ran out of memory evaluating this statement (starlark-rust: {message})"
    return f"the Starlark interpreter failed (starlark-rust panicked: {message})"


def panicking_line(statements: list[tuple[int, str]], run: Callable[[str], None]) -> int | None:
    """The first line of the statement that panics, run one by one, in order.

    `run` evaluates a statement's text in one module shared by all of them
    (padded with newlines so that its line numbers stay those of the file).
    Only on the way to an error, and in a forked process where one can be
    made: short of memory, Rust may abort instead of panicking the second
    time, which then costs only the line number.
    """
    if sys.platform != "linux" or threading.active_count() > 1:
        return _search(statements, run)  # no fork with other threads about (see parallel.py)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)  # an abort's message is not the user's business either
            os.write(write, str(_search(statements, run) or 0).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return int(answer) if answer.isdigit() and int(answer) else None


def _search(statements: list[tuple[int, str]], run: Callable[[str], None]) -> int | None:
    for line, text in statements:
        try:
            with calls_into_starlark():
                run("\n" * (line - 1) + text)
        except StarlarkPanic:
            return line
        except Exception:  # the statement fails alone (not as part of its file): stop
            return None
    return None
