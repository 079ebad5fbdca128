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

import ast
import difflib
import re
from functools import lru_cache

from kiln.errors import LoadingError, Location

_FRAME = re.compile(r"^\s*\* (?P<file>.+?):(?P<line>\d+), in ", re.MULTILINE)
_ARROW = re.compile(r"^\s*--> (?P<file>.+?):(?P<line>\d+):(?P<col>\d+)", re.MULTILINE)
_MESSAGE = re.compile(r"^error: (?P<msg>.*)$", re.MULTILINE)
_NOT_FOUND = re.compile(
    r"Variable `(?P<name>[^`]+)` not found(?:, did you mean `(?P<close>[^`]+)`\?)?"
)
_EXPECTED = re.compile(r", expected one of (?P<tokens>.*)$")
_MISSING_SYMBOL = re.compile(r"^Module has no symbol `(?P<name>[^`]+)`")
_NOT_DATA = re.compile(r"Operation `serde::serialize` not supported on type `(?P<type>\w+)`")
_OUTSIDE_DEF = re.compile(r"^`(?P<stmt>\w+)` cannot be used outside `def` in this dialect")


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
    # A native function refusing a call raises RuntimeError, and a value starlark
    # cannot convert raises StarlarkError: the exception's type is noise.
    message = message.removeprefix("RuntimeError: ").removeprefix("StarlarkError: ")
    hint = None
    if not_found := _NOT_FOUND.search(message):
        name = not_found.group("name")
        message = f"name '{name}' is not defined (no such rule or function)"
        close = difflib.get_close_matches(name, known_names, n=1)
        suggestion = close[0] if close else not_found.group("close")
        if suggestion:
            hint = f"did you mean '{suggestion}'?"
    elif not_data := _NOT_DATA.search(message):
        kind = "function" if "callable" in not_data.group("type") else not_data.group("type")
        message = (
            f"a {kind} cannot be passed to a rule: attribute values are strings, numbers, "
            "booleans, None, and lists and dicts of them"
        )
    elif missing_symbol := _MISSING_SYMBOL.search(message):
        message = f"load(): the loaded file has no symbol '{missing_symbol.group('name')}'"
    elif message.startswith("`def` is not allowed"):
        message = "functions may not be defined in BUILD files"
        hint = "move the `def` into a .bzl file and load() it"
    elif message.startswith("`lambda` is not allowed"):
        message = "lambda expressions may not be used in BUILD files"
        hint = "move the logic into a .bzl file and load() it"
    elif outside_def := _OUTSIDE_DEF.search(message):
        message = f"'{outside_def.group('stmt')}' statements are not allowed in BUILD files"
        hint = "use a list comprehension, or move the logic into a macro in a .bzl file"
    elif "Parse error" in message:
        message = "syntax error: " + message.replace("Parse error: ", "")
        expected = _EXPECTED.search(message)
        if expected and expected.group("tokens").count(",") >= 3:
            # starlark-rust lists every token the grammar allows; past a few it is noise.
            message = message[: expected.start()]
    return LoadingError(message, location=location_from(text), hint=hint, details=text)


def in_file(location: Location | None, text: str, file: str) -> Location | None:
    """`location`, or where `text` points into `file` when `location` lacks a line.

    A failing load() callback knows its file but not the line of the load
    statement; the Starlark error it causes does.
    """
    if location is not None and (location.line or location.file != file):
        return location
    found = location_from(text)
    if found is not None and found.file == file:
        return found
    return location or found


# BUILD files are (a subset of) Python syntax, so Python's parser can find the
# calls an error location falls in. Only used on the error path; a file that
# Python cannot parse simply gets no refinement.
@lru_cache(maxsize=8)
def _calls(source: str) -> tuple[ast.Call, ...]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # Python's limits are lower
        return ()
    return tuple(node for node in ast.walk(tree) if isinstance(node, ast.Call))


def with_column(location: Location, source: str) -> Location:
    """`location` with a column: the leftmost call starting on its line.

    The outermost Starlark frame of a macro's error names the BUILD line but
    no column (starlark-rust points its arrow into the .bzl file).
    """
    if location.column or not location.line:
        return location
    starts = [c.col_offset for c in _calls(source) if c.lineno == location.line]
    if starts:
        return Location(location.file, location.line, min(starts) + 1)
    lines = source.splitlines()
    text = lines[location.line - 1] if location.line <= len(lines) else ""
    return Location(location.file, location.line, len(text) - len(text.lstrip()) + 1)


def target_name_at(source: str, location: Location) -> str | None:
    """The literal `name = "..."` of the innermost call enclosing `location`, if any.

    Lets an error without a target (an unknown rule, a bad glob() inside a
    rule's attributes) still name the target it was declaring.
    """
    pos = (location.line, location.column - 1)
    best: tuple[tuple[int, int], str] | None = None
    for call in _calls(source):
        end = (call.end_lineno or call.lineno, call.end_col_offset or 0)
        if not (call.lineno, call.col_offset) <= pos < end:
            continue
        for keyword in call.keywords:
            value = keyword.value
            if (
                keyword.arg == "name"
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and (best is None or (call.lineno, call.col_offset) > best[0])
            ):
                best = ((call.lineno, call.col_offset), value.value)
    return best[1] if best else None
