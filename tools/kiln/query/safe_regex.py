"""Regular expressions of kind(), filter() and attr(), matched in linear time.

Python's `re` backtracks: `filter("(a+)+$", //...)` over a label of thirty
a's ran for minutes (issue 11, B12). RE2 (the `google-re2` wheel) matches
in time linear in the text, whatever the pattern, and bounds the memory a
pattern may compile to. It has Python's syntax less what only backtracking
can do: backreferences and lookaround are refused, with a message.
"""

from __future__ import annotations

from typing import Protocol

from kiln.errors import KilnError

# RE2's default budget for one compiled pattern; a pattern past it is refused.
MAX_MEMORY = 8 << 20


class InvalidRegex(KilnError):
    pass


class Regex(Protocol):
    def search(self, text: str) -> object | None: ...


def compile(pattern: str) -> Regex:
    import re2  # only queries that match need it

    options = re2.Options()
    options.log_errors = False  # RE2 would print each bad pattern to stderr itself
    options.max_mem = MAX_MEMORY
    try:
        regex: Regex = re2.compile(pattern, options=options)
    except re2.error as error:
        reason = error.args[0] if error.args else ""
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        reason = str(reason)
        unsupported = "perl operator" in reason or "escape sequence" in reason
        raise InvalidRegex(
            f"invalid regular expression '{pattern}': {reason}",
            hint="kiln matches with RE2: Python's syntax without backreferences or lookaround"
            if unsupported
            else None,
        ) from None
    return regex
