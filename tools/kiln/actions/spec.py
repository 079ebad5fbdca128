"""Reading an action's JSON spec, and failing the way the executor expects."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

ERROR_PREFIX = "kiln-action-error: "


class ActionFailure(Exception):
    """A failure caused by the model or its settings; reported in one line."""


def read(argv: list[str]) -> dict[str, Any]:
    if len(argv) != 1:
        fail(f"usage: python -m kiln.actions.<name> SPEC.json (got {argv})")
    spec: dict[str, Any] = json.loads(Path(argv[0]).read_text())
    return spec


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"{ERROR_PREFIX}{message}\n")
    sys.stderr.flush()
    raise SystemExit(1)


def run(main: Any, argv: list[str]) -> None:
    """Call main(spec); report ActionFailure as one line and exit 1."""
    spec = read(argv)
    try:
        main(spec)
    except ActionFailure as error:
        fail(str(error))
