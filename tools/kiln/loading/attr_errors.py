"""Describing an attribute schema's validation failure in a BUILD author's words."""

from __future__ import annotations

import difflib
import reprlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

    from kiln.rule_api import RuleAttrs


def describe(error: ValidationError, schema: type[RuleAttrs], rule: str) -> tuple[str, str | None]:
    """(message, hint) for every problem pydantic found, in attribute order."""
    problems: list[str] = []
    hint: str | None = None
    known = [info.alias or name for name, info in schema.model_fields.items()]
    for item in error.errors():
        loc = item["loc"]
        attr = str(loc[0]) if loc else "?"
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[1:])
        kind = item["type"]
        if kind == "extra_forbidden" and not path:
            problems.append(f"{rule}() got an unknown attribute '{attr}'")
            close = difflib.get_close_matches(attr, known, n=1)
            if close and hint is None:
                hint = f"did you mean '{close[0]}'?"
        elif kind == "missing" and not path:
            problems.append(f"{rule}() is missing the mandatory attribute '{attr}'")
        elif kind == "value_error":
            # A validator's own sentence (a range, how attributes fit together) says it
            # all; the value it checked would be a dump of the attributes (issue 11).
            msg = str(item["msg"]).removeprefix("Value error, ")
            where = f"attribute '{attr}{path}' of {rule}()" if loc else f"{rule}()"
            problems.append(f"{where}: {msg}")
        else:
            got = _starlark_repr(item.get("input"))
            msg = item["msg"].rstrip(".")
            if msg.startswith("Input should be "):  # pydantic's wording for a wrong type or value
                problems.append(f"attribute '{attr}{path}' of {rule}() {msg[6:]} (got {got})")
            else:
                problems.append(f"attribute '{attr}{path}' of {rule}(): {msg} (got {got})")
    if hint is None and len(problems) == 1 and "mandatory" in problems[0]:
        hint = f"add it to the {rule}() call"
    return "; ".join(problems), hint


def _starlark_repr(value: object) -> str:
    if value is None:
        return "None"
    if value is True or value is False:
        return "True" if value else "False"
    # reprlib stops at a few levels: a value 999 deep (the most starlark-pyo3 converts)
    # made repr() raise RecursionError, which became the message.
    text = _SHORT.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_SHORT = reprlib.Repr()
_SHORT.maxlevel = 4
_SHORT.maxstring = _SHORT.maxother = 60
