"""A fast scan of a BUILD or .bzl file's nesting, before starlark-rust sees it.

starlark-rust parses, compiles and evaluates recursively on the C stack: a
list 2,400 deep, a `+` chain of 4,000 terms, dicts 2,000 deep or `if`s
nested 2,000 deep overflow the 8 MiB main-thread stack and kill the process
with SIGSEGV, no message (issue 11, B3). Python's recursion limit has no say
there, so the depth is bounded before the source is parsed.

The scan reads only the tokens that make a syntax tree deeper, and counts
conservatively: on the path from the statement down to the deepest point,
one for every open bracket, one for every operator (a left-leaning chain
`a + b + c` is as deep as it is long; unary `-`, `not`, `.` and keyword
operators count too, and a call or subscript is one more operation on what
it follows), and one for every enclosing indented block. A `,`, `;` or
assignment starts a new operand at that level, and a new logical line a new
statement. Measured on starlark-pyo3 2026.1.3 with an 8 MiB stack, a unit
costs at most about 4 KiB (nested `if` blocks; a `+` 2.5 KiB), and random
mixtures of every shape survive twice MAX_DEPTH and crash at 2.5 times it
(tests/unit/loading/test_nesting.py runs them at MAX_DEPTH). Real files stay
in the tens.

Scanning costs about 1 us a token, so it runs only when a cheap upper bound
(every bracket, operator character, keyword and indented line in the file
counted once, at C speed: some 15 us for a 2 kB BUILD file) is past
MAX_DEPTH, as it is in large generated files.

The same scan splits a file into its top-level statements, which lets an
error without a location (a Rust panic) be pinned on the statement that
raised it by evaluating them one by one.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from kiln.errors import LoadingError, Location

MAX_DEPTH = 1000

_TOKEN = re.compile(
    r"""
      (?P<string>[rRbB]{0,2}(?:
          \"\"\"(?:[^\\"]|\\.|"(?!""))*(?:\"\"\"|\Z)
        | '''(?:[^\\']|\\.|'(?!''))*(?:'''|\Z)
        | "(?:[^\\"\n]|\\.)*"?
        | '(?:[^\\'\n]|\\.)*'?
      ))
    | (?P<comment>\#[^\n]*)
    | (?P<continuation>\\\n)
    | (?P<newline>\n)
    | (?P<open>[(\[{])
    | (?P<close>[)\]}])
    | (?P<separator>[,;]|(?:\*\*|//|<<|>>|[-+*/%&|^])?=(?!=))
    | (?P<operator>==|!=|<=|>=|->|\*\*|//|<<|>>|[-+*/%&|^~<>.@])
    | (?P<number>\b\d[\w.]*)
    | (?P<keyword>\b(?:and|or|not|in|is|if|else|lambda|for)\b)
    """,
    re.VERBOSE | re.DOTALL,
)
_INDENT = re.compile(r"[ \t]*")
# What the upper bound ignores: characters that are never a unit of depth.
_NEVER_DEEPER = str.maketrans("", "", string.ascii_letters + string.digits + "_ \t\r\n\"':,;#")
# Keywords that are operators; counted as substrings, which only loosens the bound.
_KEYWORDS = ("and", "or", "not", "in", "is", "if", "else", "lambda")


@dataclass(frozen=True, slots=True)
class TooDeep:
    """Where the nesting first went past MAX_DEPTH (1-based line and column)."""

    line: int
    column: int


def check(source: str, file: str) -> None:
    """Raise a LoadingError pointing at where `source` (from `file`) nests too deeply."""
    found = too_deep(source)
    if found is not None:
        raise LoadingError(
            f"nested too deeply: more than {MAX_DEPTH:,} levels of brackets, operators and "
            "blocks, which would overflow the Starlark evaluator's stack",
            location=Location(file, found.line, found.column),
            hint="build the value in steps: intermediate variables, or a list comprehension",
        )


def too_deep(source: str) -> TooDeep | None:
    """Where `source` nests deeper than MAX_DEPTH, or None if it does not."""
    if _upper_bound(source) <= MAX_DEPTH:
        return None
    return _Scan(source).depth_error


def _ends_operand(source: str, pos: int) -> bool:
    """Whether the text before `pos` ends an operand (a name, literal or bracket), so
    that a bracket at `pos` calls or subscripts it. A keyword before it counts too:
    one unit too many, never one too few."""
    before = source[max(0, pos - 8) : pos].rstrip()
    return bool(before) and (before[-1].isalnum() or before[-1] in "_'\")]}")


def _upper_bound(source: str) -> int:
    """At least the deepest point's count: each unit is a distinct token of the file
    (an open bracket two: itself and the operation on the operand before it)."""
    return (
        len(source.translate(_NEVER_DEEPER))
        + source.count("(")
        + source.count("[")
        + source.count("{")
        + sum(map(source.count, _KEYWORDS))
        + source.count("\n ")
        + source.count("\n\t")
        + 1  # the first line's indentation
    )


def statements(source: str) -> list[tuple[int, str]]:
    """The top-level statements of `source`: (first line, text) each, in order."""
    starts = _Scan(source).statement_starts
    if not starts:
        return []
    ends = [*starts[1:], len(source)]
    return [
        (source.count("\n", 0, start) + 1, source[start:end])
        for start, end in zip(starts, ends, strict=True)
    ]


class _Scan:
    def __init__(self, source: str):
        self.depth_error: TooDeep | None = None
        self.max_depth = 0  # the deepest point, up to the first past MAX_DEPTH
        self.statement_starts: list[int] = []
        self._scan(source)

    def _scan(self, source: str) -> None:
        # ops[i]: operators counted so far in the current operand at bracket level i.
        ops = [0]
        total = 0  # sum(ops)
        indents = [0]  # columns of the enclosing blocks
        self._line_start(source, 0, indents)
        for token in _TOKEN.finditer(source):
            kind = token.lastgroup
            if kind == "open":
                if _ends_operand(source, token.start()):  # a call or subscript: one more
                    ops[-1] += 1  # operation on the operand before it
                    total += 1
                ops.append(0)
            elif kind in {"operator", "keyword"}:
                ops[-1] += 1
                total += 1
            elif kind == "close":
                if len(ops) > 1:
                    total -= ops.pop()
                continue
            elif kind == "separator":
                total -= ops[-1]
                ops[-1] = 0
                continue
            elif kind == "newline":
                if len(ops) == 1:  # a logical line ends outside any bracket
                    total = ops[0] = 0
                    self._line_start(source, token.end(), indents)
                continue
            else:
                continue
            depth = total + len(ops) - 1 + len(indents) - 1
            self.max_depth = max(self.max_depth, depth)
            if depth > MAX_DEPTH:
                start = token.start()
                line = source.count("\n", 0, start) + 1
                self.depth_error = TooDeep(line, start - source.rfind("\n", 0, start))
                return

    def _line_start(self, source: str, pos: int, indents: list[int]) -> None:
        end = _INDENT.match(source, pos).end()  # type: ignore[union-attr]
        if end == len(source) or source[end] in "\r\n#":
            return  # a blank or comment line opens and closes no block
        column = end - pos
        while column < indents[-1]:
            indents.pop()
        if column > indents[-1]:
            indents.append(column)
        if column == 0:
            self.statement_starts.append(pos)
