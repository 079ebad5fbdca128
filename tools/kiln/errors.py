"""The one error base of kiln, and where an error happened.

Every user-facing failure is a KilnError. The CLI formats it once, as
`ERROR: <file>:<line>:<col>: <label>: <message>`, and exits 1; anything else
that escapes is a bug in kiln and exits 2 with a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Location:
    """A place in a BUILD, .bzl or rc file (path relative to the workspace when inside it)."""

    file: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        if self.line and self.column:
            return f"{self.file}:{self.line}:{self.column}"
        if self.line:
            return f"{self.file}:{self.line}"
        return self.file


class KilnError(Exception):
    """A failure caused by the user's input or environment, not by a bug in kiln."""

    def __init__(
        self,
        message: str,
        *,
        location: Location | None = None,
        label: str | None = None,
        hint: str | None = None,
        details: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.label = label
        self.hint = hint
        # Extra context shown only with --verbose_failures (e.g. a Starlark stack).
        self.details = details

    def format(self, *, verbose: bool = False) -> str:
        parts = [str(self.location)] if self.location else []
        if self.label:
            parts.append(self.label)
        parts.append(self.message)
        text = ": ".join(parts)
        if self.hint:
            text += f"\n  hint: {self.hint}"
        if verbose and self.details:
            text += "\n" + self.details.rstrip()
        return text


class LabelError(KilnError):
    """A label or target pattern that is not well formed."""


class LoadingError(KilnError):
    """A BUILD or .bzl file that cannot be evaluated, or a target it declares is invalid."""


class BuildFailure(KilnError):
    """One or more actions failed; details were already reported as they happened."""
