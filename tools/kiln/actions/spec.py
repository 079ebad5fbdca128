"""Reading an action's spec record, and failing the way the executor expects."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, NoReturn, TypeVar

from kiln.action_specs import Spec, SpecError
from kiln.actions.action_profile import profiled

ERROR_PREFIX = "kiln-action-error: "
# Set (to 1) where the user asked for --verbose_failures: a failure then shows Python's
# traceback and what the action printed, after its one paragraph.
VERBOSE_ENV = "KILN_VERBOSE_FAILURES"

S = TypeVar("S", bound=Spec)


class ActionFailure(Exception):
    """A failure caused by the model or its settings; reported in one paragraph."""

    def format(self, *, verbose: bool) -> str:
        del verbose
        return str(self)


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"{ERROR_PREFIX}{message}\n")
    sys.stderr.flush()
    raise SystemExit(1)


def run(
    main: Callable[[S], None], spec_type: type[S], argv: list[str], *, quiet: bool = False
) -> None:
    """Read argv's one spec file as `spec_type`, call main(spec); report an unreadable
    spec or an ActionFailure as one paragraph and exit 1.

    quiet: what torch prints while main runs (warnings, logging, C++ TORCH_WARN) is
    held back at the file-descriptor level and shown only if main succeeds, so a
    failure reads as its one paragraph; with KILN_VERBOSE_FAILURES=1 it is shown too.
    """
    if len(argv) != 1:
        fail(f"usage: python -m kiln.actions.<name> SPEC.json (got {argv})")
    try:
        spec = spec_type.read(argv[0])
    except SpecError as error:
        fail(str(error))
    with _held_output(enabled=quiet) as held:
        try:
            with profiled(spec_type.__name__):
                main(spec)
        except ActionFailure as error:
            held.failed = not verbose()
            failure = error
        else:
            return
    fail(failure.format(verbose=verbose()))


class _Held:
    failed = False  # drop what was held instead of showing it


@contextlib.contextmanager
def _held_output(*, enabled: bool) -> Iterator[_Held]:
    """Redirect fds 1 and 2 to temporary files; replay them afterwards unless dropped."""
    held = _Held()
    if not enabled:
        yield held
        return
    with contextlib.ExitStack() as files:
        saved: list[tuple[int, int, IO[bytes]]] = []
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            stream.flush()
            spool: IO[bytes] = files.enter_context(tempfile.TemporaryFile())
            saved.append((fd, os.dup(fd), spool))
            os.dup2(spool.fileno(), fd)
        try:
            yield held
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, original, kept in saved:
                os.dup2(original, fd)
                os.close(original)
                if not held.failed:
                    kept.seek(0)
                    data = memoryview(kept.read())
                    while data:
                        data = data[os.write(fd, data) :]
