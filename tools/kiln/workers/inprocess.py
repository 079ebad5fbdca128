"""Run one request inside the worker process as `python -m module args` would run it.

For the duration of one action, and restored afterwards:

- fds 1 and 2 point at the request's stdout/stderr files (os.dup2, so output
  of C extensions and of child processes lands there too), and sys.stdout and
  sys.stderr are fresh text streams over them, buffered the way the
  interpreter buffers them at start-up (PYTHONIOENCODING and PYTHONUNBUFFERED
  of the request are honoured); so is the C library's stdout (cstdio.py).
  Python's buffers, then C's, are flushed before the fds go back.
- the working directory is the execroot; os.environ is the request's env
  (through putenv, so C code sees it as well).
- sys.argv, sys.path, imported modules and other interpreter and process
  state: see isolation.py.

The module runs through runpy.run_module(name, run_name="__main__",
alter_sys=True); SystemExit becomes the exit status as the interpreter
computes it, any other exception is printed by sys.excepthook and exits 1.
The traceback omits the runner's frames (a plain `python -m` shows two
`<frozen runpy>` frames above the module's own): the one difference in output.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import sys
import traceback
from collections.abc import Iterator
from typing import BinaryIO, TextIO

from kiln.workers.cstdio import CStdout
from kiln.workers.isolation import Baseline, isolated
from kiln.workers.protocol import WorkRequest

# Frames of these modules sit above the action's own in a traceback; they are not shown.
_RUNNER_MODULES = frozenset({"runpy", __name__})

_C_STDOUT = CStdout()


class SetupError(Exception):
    """The action could not be started (missing execroot, unwritable output file)."""


def run_request(request: WorkRequest, baseline: Baseline) -> int:
    """Run the request's module to completion; its exit status (SetupError if it never ran)."""
    module = request.module
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(_redirected_fds(request.stdout_path, request.stderr_path))
            stack.enter_context(_working_directory(request.cwd, baseline.home))
        except OSError as e:
            raise SetupError(f"cannot start {module}: {e}") from e
        # Entered after fd 1 moved, left before it moves back: flushed after Python's
        # streams, as at interpreter exit.
        stack.enter_context(_C_STDOUT.fresh(unbuffered=bool(request.env.get("PYTHONUNBUFFERED"))))
        stack.enter_context(_environment(request.env))
        stack.enter_context(_python_streams(request.env, baseline))
        stack.enter_context(isolated(request, baseline))
        status = _run_module(module)
        if not _flush_python_streams() and status == 0:
            status = 120  # what the interpreter exits with when flushing stdout fails
        return status


def _run_module(module: str) -> int:
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        _C_STDOUT.flush_stdout()  # the interpreter's order: C stdout, the message, Python's
        return _exit_status(e.code)
    except BaseException as e:  # the action's own failure, reported as the interpreter would
        _C_STDOUT.flush_stdout()
        _report_uncaught(e)
        return 1
    return 0


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF  # the status the OS keeps: sys.exit(256) exits 0, sys.exit(-1) 255
    print(code, file=sys.stderr)
    return 1


def _report_uncaught(error: BaseException) -> None:
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in _RUNNER_MODULES:
        tb = tb.tb_next
    if tb is None and isinstance(error, ImportError):
        # Raised by runpy before the module ran: `python -m` prints it as one line.
        print(f"{sys.executable}: {error}", file=sys.stderr)
        return
    error.__traceback__ = tb  # the default hook prints the exception's own traceback
    try:
        sys.excepthook(type(error), error, tb)
    except BaseException:  # a broken excepthook: the interpreter falls back to the default
        traceback.print_exception(type(error), error, tb)


def _flush_python_streams() -> bool:
    ok = True
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue  # as the interpreter skips them at exit
        try:
            stream.flush()
        except (OSError, ValueError):
            ok = False
    return ok


@contextlib.contextmanager
def _redirected_fds(stdout_path: str, stderr_path: str) -> Iterator[None]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    out = os.open(stdout_path, flags, 0o666)
    try:
        # One file for both streams shares one offset, as `2>&1` would.
        err = out if stderr_path == stdout_path else os.open(stderr_path, flags, 0o666)
    except OSError:
        os.close(out)
        raise
    _flush_python_streams()  # the worker's own output must not land in the action's files
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(out, 1)
        os.dup2(err, 2)
        yield
    finally:
        _flush_python_streams()
        _C_STDOUT.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in {*saved, out, err}:
            os.close(fd)


@contextlib.contextmanager
def _working_directory(cwd: str, home: str) -> Iterator[None]:
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(home)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _python_streams(env: dict[str, str], baseline: Baseline) -> Iterator[None]:
    encoding, errors = baseline.encoding, baseline.errors
    io_encoding, _, io_errors = env.get("PYTHONIOENCODING", "").partition(":")
    encoding = io_encoding or encoding
    errors = io_errors or errors
    buffered = not env.get("PYTHONUNBUFFERED")
    saved = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    stdout = _open_stdio(1, "<stdout>", encoding, errors, buffered)
    stderr = _open_stdio(2, "<stderr>", encoding, "backslashreplace", buffered)
    _set_std_streams((stdout, stderr, stdout, stderr))
    try:
        yield
    finally:
        _flush_python_streams()
        _set_std_streams(saved)
        for stream in (stdout, stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.close()  # closefd=False: the fd stays, the object refuses further writes


def _set_std_streams(streams: tuple[TextIO | None, ...]) -> None:
    # In a fresh interpreter sys.stdout is sys.__stdout__; keep it so for the action.
    for name, stream in zip(("stdout", "stderr", "__stdout__", "__stderr__"), streams, strict=True):
        setattr(sys, name, stream)


def _open_stdio(fd: int, name: str, encoding: str, errors: str, buffered: bool) -> TextIO:
    """A text stream over fd built the way the interpreter builds sys.stdout at start-up."""
    raw = io.FileIO(fd, "w", closefd=False)
    raw.name = name  # as the interpreter names it
    binary: BinaryIO = raw
    if buffered:
        size = os.fstat(fd).st_blksize
        binary = io.BufferedWriter(raw, size if size > 1 else io.DEFAULT_BUFFER_SIZE)
    stream = io.TextIOWrapper(
        binary,
        encoding=encoding,
        errors=errors,
        newline="\n",
        line_buffering=buffered and (fd == 2 or raw.isatty()),
        write_through=not buffered,
    )
    stream.mode = "w"  # type: ignore[misc]
    return stream
