"""Reading an action's spec record, and failing the way the executor expects."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

from kiln.action_specs import Spec, SpecError

ERROR_PREFIX = "kiln-action-error: "

S = TypeVar("S", bound=Spec)


class ActionFailure(Exception):
    """A failure caused by the model or its settings; reported in one line."""


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"{ERROR_PREFIX}{message}\n")
    sys.stderr.flush()
    raise SystemExit(1)


def run(main: Callable[[S], None], spec_type: type[S], argv: list[str]) -> None:
    """Read argv's one spec file as `spec_type`, call main(spec); report an unreadable
    spec or an ActionFailure as one line and exit 1."""
    if len(argv) != 1:
        fail(f"usage: python -m kiln.actions.<name> SPEC.json (got {argv})")
    try:
        spec = spec_type.read(argv[0])
    except SpecError as error:
        fail(str(error))
    try:
        main(spec)
    except ActionFailure as error:
        fail(str(error))
