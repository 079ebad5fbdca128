"""Deep nesting and Rust panics in BUILD and .bzl files: one-line errors, never a crash.

starlark-rust recurses on the C stack: the shapes below killed kiln with
SIGSEGV (exit 139) before any message, and one such package killed
`kiln query //...` (issue 11, B3). A value over 4 GiB made it panic, which
printed a Rust backtrace and escaped as a Python traceback (B10).
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kiln.loading import nesting, rust_panics

from tests.kiln_workspace import MakeWorkspace

HINT = "  hint: build the value in steps: intermediate variables, or a list comprehension\n"
TOO_DEEP = (
    "nested too deeply: more than 1,000 levels of brackets, operators and blocks, which "
    "would overflow the Starlark evaluator's stack\n" + HINT
)


def _deep_list(n: int) -> str:
    return "[" * n + "]" * n


def _plus_chain(n: int) -> str:
    return " + ".join(["[]"] * n)


def _deep_dict(n: int) -> str:
    return '{"k": ' * n + "1" + "}" * n


@pytest.mark.parametrize(
    ("shape", "value", "column"),
    [
        ("list_2400_deep", _deep_list(2400), 1028),
        ("plus_chain_of_4000_terms", _plus_chain(4000), 5020),
        ("dict_3000_deep", _deep_dict(3000), 6018),
    ],
)
def test_nesting_that_segfaulted_starlark_is_an_error_naming_file_line_and_target(
    make_workspace: MakeWorkspace, shape: str, value: str, column: int
) -> None:
    ws = make_workspace(
        {
            "ok/BUILD": 'filegroup(name = "fine")\n',
            "deep/BUILD": f'filegroup(name = "a")\nfilegroup(name = "b", srcs = {value})\n',
        }
    )
    run = ws.kiln("query", "//...")
    assert run.code == 1, shape
    assert run.err == f"ERROR: deep/BUILD:2:{column}: //deep:b: {TOO_DEEP}"


def test_nesting_in_a_bzl_file_points_into_the_bzl_file(make_workspace: MakeWorkspace) -> None:
    body = "".join(" " * (i + 1) + "if True:\n" for i in range(1100))
    ws = make_workspace(
        {
            "p/BUILD": 'load(":defs.bzl", "f")\nfilegroup(name = "a")\n',
            "p/defs.bzl": f"def f():\n{body}{' ' * 1101}pass\n",
        }
    )
    run = ws.kiln("query", "//p:a")
    assert run.code == 1
    assert run.err == f"ERROR: p/defs.bzl:1001:1001: {TOO_DEEP}"


def test_nesting_within_the_limit_still_evaluates(make_workspace: MakeWorkspace) -> None:
    ws = make_workspace({"p/BUILD": f'filegroup(name = "a", srcs = {_plus_chain(900)})\n'})
    assert ws.query("//p:a") == ["//p:a"]


# Every shape that costs starlark-rust stack, combined at random, each source
# scanned as just within MAX_DEPTH: run in a separate process, so a crash
# fails the test instead of killing the run.
_PROBE = """
import json, sys
import starlark as sl
dialect = sl.Dialect.standard()
dialect.enable_def = dialect.enable_lambda = dialect.enable_top_level_stmt = True
globals = sl.Globals.extended_by([sl.LibraryExtension.StructType])
for source in json.load(sys.stdin):
    try:
        sl.eval(sl.Module(), sl.parse("probe.bzl", source, dialect), globals)
    except sl.StarlarkError:
        pass
print("survived")
"""

_WRAPS = [
    ("[", "]"),
    ('{"k": ', "}"),
    ("(", ",)"),
    ("len([", "])"),
    ("struct(a = ", ").a"),
    ("[x for x in [", "]]"),
    ("(lambda: ", ")()"),
    ("[", "][0]"),
    ("not ", ""),
    ("-(", ")"),
    ("1 if True else ", ""),
    ("1 + ", ""),
]


def _units(opened: str, closed: str) -> int:
    """How many units of depth one wrap adds, as the scan counts them."""
    return (
        nesting._Scan(f"x = {opened * 2}1{closed * 2}\n").max_depth
        - nesting._Scan(f"x = {opened}1{closed}\n").max_depth
    )


def _random_source(rng: random.Random) -> str:
    """A random nesting of _WRAPS, inside nested blocks or not, as deep as the guard allows."""
    blocks = rng.randint(1, 300) if rng.random() < 0.3 else 0
    budget = nesting.MAX_DEPTH - blocks - 10  # wraps side by side may count one more
    opened: list[str] = []
    closed: list[str] = []
    while budget > 0:
        start, end = rng.choice(_WRAPS)
        repeat = min(rng.randint(1, 200), budget // _units(start, end))
        if repeat:
            opened.append(start * repeat)
            closed.append(end * repeat)
            budget -= repeat * _units(start, end)
        elif all(_units(*wrap) > budget for wrap in _WRAPS):
            break
    expression = "".join([*opened, "1", *reversed(closed)])
    if not blocks:
        return f"x = {expression}\n"
    body = "".join(" " * i + "if True:\n" for i in range(1, blocks + 1))
    return f"def f():\n{body}{' ' * (blocks + 1)}return {expression}\nx = f()\n"


@pytest.mark.slow
def test_sources_the_guard_lets_through_never_crash_starlark() -> None:
    rng = random.Random(11)
    sources = [_random_source(rng) for _ in range(150)]
    depths = [nesting._Scan(source).max_depth for source in sources]
    assert 980 < min(depths) <= max(depths) <= nesting.MAX_DEPTH  # each one at the limit
    run = subprocess.run(
        [sys.executable, "-c", _PROBE],
        input=json.dumps(sources),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "survived"


_UNITS = st.sampled_from(
    ["(", ")", "[", "]", "{", "}", "+", "-", ".", ",", "=", "==", " not ", " and ", " if ",
     " else ", " lambda ", "1", "x", '"', "'", "#", "\n", "\n ", "\n  ", "\\\n", ":", '"""']
)  # fmt: skip


@given(st.lists(_UNITS, max_size=400).map("".join))
def test_cheap_bound_is_never_below_the_scanned_depth(source: str) -> None:
    assert nesting._upper_bound(source) >= nesting._Scan(source).max_depth


def test_a_file_of_no_statement_splits_into_none() -> None:
    # Found by tests/fuzz_loading.py: a file that is all indented lines.
    assert nesting.statements("  x = [" + "[" * 1100) == []


def test_statements_are_split_at_top_level_lines() -> None:
    source = 'load("a", "b")\n\nx = [\n  1,\n]\n# c\nfoo(name = "a",\n    x = """\nq\n""")\n'
    assert nesting.statements(source) == [
        (1, 'load("a", "b")\n\n'),
        (3, "x = [\n  1,\n]\n# c\n"),
        (7, 'foo(name = "a",\n    x = """\nq\n""")\n'),
    ]


# -- Rust panics ---------------------------------------------------------------

OUT_OF_MEMORY = (
    "Starlark ran out of memory evaluating this statement (starlark-rust: out of memory)\n"
    "  hint: build a smaller value; the evaluator cannot report this as a Starlark error\n"
)
# 100 MB, then 300 MB more: past the 400 MB of address space the process gets below.
BIG = '"a" * 100000000'


def _kiln_with_little_memory(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A real process: Rust's panic hook writes to file descriptor 2 itself, and
    # RUST_BACKTRACE=1 asks it for a backtrace on top.
    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))

    return subprocess.run(
        [sys.executable, "-m", "kiln", *args],
        cwd=root,
        env=dict(os.environ, RUST_BACKTRACE="1"),
        preexec_fn=limit_memory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"p/BUILD": f'filegroup(name = "a")\n\nx = {BIG}\ny = x + x + x\n'},
            "ERROR: p/BUILD:4:1: ",
        ),
        (
            {
                "p/BUILD": 'load(":defs.bzl", "f")\nfilegroup(name = "a")\n'
                'filegroup(name = "b", srcs = f())\n',
                "p/defs.bzl": f"def f():\n    x = {BIG}\n    return [x + x + x]\n",
            },
            "ERROR: p/BUILD:3:1: //p:b: ",
        ),
        (
            {
                "p/BUILD": 'load(":defs.bzl", "x")\nfilegroup(name = "a")\n',
                "p/defs.bzl": f"def g():\n    y = {BIG}\n    return len(y + y + y)\n\nx = g()\n",
            },
            "ERROR: p/defs.bzl:5:1: ",
        ),
    ],
    ids=["in_a_build_file", "in_a_macro", "at_bzl_top_level"],
)
def test_starlark_out_of_memory_panic_is_one_error_without_a_rust_backtrace(
    make_workspace: MakeWorkspace, files: dict[str, str], expected: str
) -> None:
    ws = make_workspace(files)
    run = _kiln_with_little_memory(ws.root, "query", "//p:all")
    assert run.returncode == 1
    assert run.stderr == expected + OUT_OF_MEMORY


def test_panic_over_4_gib_is_described_as_a_value_too_large() -> None:
    # The panic of `[0] * 2000000000` (not run here: it allocates 16 GB first).
    assert rust_panics.describe("AlignedSize must not exceed u32::MAX") == (
        "a value too large for Starlark: over 4 GiB (starlark-rust: AlignedSize must not "
        "exceed u32::MAX)"
    )


class PanicException(BaseException):
    """A stand-in for pyo3's, which cannot be imported by name (matched by name too)."""


def test_what_starlark_writes_to_stderr_besides_a_panic_hook_is_passed_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with rust_panics.calls_into_starlark():
        os.write(2, b"a warning\n")
    with pytest.raises(rust_panics.StarlarkPanic, match="boom"), rust_panics.calls_into_starlark():
        os.write(2, b"before\n\nthread '<unnamed>' (12) panicked at x.rs:1:2:\nboom\n")
        raise PanicException("boom")
    assert capfd.readouterr().err == "a warning\nbefore\n"
