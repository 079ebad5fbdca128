"""Turning starlark-rust's error text into a KilnError with a location.

starlark-pyo3 raises StarlarkError whose text is a traceback such as

    Traceback (most recent call last):
      * models/BUILD:4, in <module>
          m(name="bad")
      * tools/macros.bzl:3, in m
          genrule(name=name)
    error: Variable `genrul` not found
     --> tools/macros.bzl:3:5

The outermost frame is the line of the BUILD file the user wrote, which is
where Bazel points too; the whole stack goes into the error's details.
"""

from __future__ import annotations

import difflib
import re

from kiln.errors import LoadingError, Location

_FRAME = re.compile(r"^\s*\* (?P<file>.+?):(?P<line>\d+), in ", re.MULTILINE)
_ARROW = re.compile(r"^\s*--> (?P<file>.+?):(?P<line>\d+):(?P<col>\d+)", re.MULTILINE)
_MESSAGE = re.compile(r"^error: (?P<msg>.*)$", re.MULTILINE)
_NOT_FOUND = re.compile(r"Variable `(?P<name>[^`]+)` not found(?:, did you mean `[^`]+`\?)?")


def location_from(text: str) -> Location | None:
    """The location a starlark error text points at (outermost frame first)."""
    arrow = _ARROW.search(text)
    frame = _FRAME.search(text)
    if frame:
        column = 0
        if arrow and arrow.group("file") == frame.group("file"):
            column = int(arrow.group("col"))
        return Location(frame.group("file"), int(frame.group("line")), column)
    if arrow:
        return Location(arrow.group("file"), int(arrow.group("line")), int(arrow.group("col")))
    return None


def to_loading_error(text: str, known_names: list[str]) -> LoadingError:
    """A LoadingError for a syntax or evaluation error reported by starlark-rust."""
    found = _MESSAGE.search(text)
    message = found.group("msg").strip() if found else text.strip().splitlines()[-1]
    hint = None
    not_found = _NOT_FOUND.search(message)
    if not_found:
        name = not_found.group("name")
        message = f"name '{name}' is not defined (no such rule or function)"
        close = difflib.get_close_matches(name, known_names, n=1)
        if close:
            hint = f"did you mean '{close[0]}'?"
    elif message.startswith("`def` is not allowed"):
        message = "functions may not be defined in BUILD files"
        hint = "move the `def` into a .bzl file and load() it"
    elif "Parse error" in message:
        message = "syntax error: " + message.replace("Parse error: ", "")
    return LoadingError(message, location=location_from(text), hint=hint, details=text)
