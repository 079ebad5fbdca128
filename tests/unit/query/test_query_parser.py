"""Bazel's query language: tokens and expression trees."""

from __future__ import annotations

import pytest
from kiln.errors import KilnError
from kiln.query.parser import Binary, Call, SetOf, Word, parse

a, b, c = Word("//a"), Word("//b"), Word("//c")


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("//a", a),
        ("//a/...", Word("//a/...")),
        ("//a:*", Word("//a:*")),
        ("//a:b-c_d.e", Word("//a:b-c_d.e")),  # '-' inside a word is part of it
        ("'//a b'", Word("//a b")),
        ('"-//a"', Word("-//a")),
        # binary operators: left-associative, all of equal precedence
        ("//a + //b", Binary("+", a, b)),
        ("//a union //b", Binary("+", a, b)),
        ("//a - //b", Binary("-", a, b)),
        ("//a -//b", Binary("-", a, b)),
        ("//a except //b", Binary("-", a, b)),
        ("//a ^ //b", Binary("^", a, b)),
        ("//a intersect //b", Binary("^", a, b)),
        ("//a - //b + //c", Binary("+", Binary("-", a, b), c)),
        ("//a + //b - //c", Binary("-", Binary("+", a, b), c)),
        ("//a ^ //b - //c", Binary("-", Binary("^", a, b), c)),
        ("//a - (//b + //c)", Binary("-", a, Binary("+", b, c))),
        ("(//a)-(//b)", Binary("-", a, b)),
        # functions, with the optional depth
        ("deps(//a)", Call("deps", (a,))),
        ("deps(//a, 2)", Call("deps", (a, 2))),
        ("deps(//a,0)", Call("deps", (a, 0))),
        ("deps( //a , 2 )", Call("deps", (a, 2))),
        ("deps(//a - //b, 1)", Call("deps", (Binary("-", a, b), 1))),
        ("deps(//a, 1) - //b", Binary("-", Call("deps", (a, 1)), b)),
        ("deps(//a) - deps(//b, 1)", Binary("-", Call("deps", (a,)), Call("deps", (b, 1)))),
        ("rdeps(//a, //b)", Call("rdeps", (a, b))),
        ("rdeps(//a, //b, 3)", Call("rdeps", (a, b, 3))),
        ("kind(genrule, //a)", Call("kind", ("genrule", a))),
        ("kind('source file', //a)", Call("kind", ("source file", a))),
        ('attr(srcs, "//b:.*", //a)', Call("attr", ("srcs", "//b:.*", a))),
        ('filter("\\.py$", //a)', Call("filter", ("\\.py$", a))),
        ("somepath(//a, //b)", Call("somepath", (a, b))),
        ("set()", SetOf(())),
        ("set(//a //b 'c d')", SetOf(("//a", "//b", "c d"))),
        # a function name not followed by '(' is a word, like any target name
        ("deps", Word("deps")),
        ("set", Word("set")),
        ("deps(2)", Call("deps", (Word("2"),))),
    ],
)
def test_parse(text: str, tree: object) -> None:
    assert parse(text) == tree


def test_multiline_expression_error_is_shown_on_one_line() -> None:
    with pytest.raises(KilnError) as raised:
        parse("deps(//a,\n\t-1)")
    assert raised.value.format() == (
        "syntax error in query expression: unexpected '-' (expected a depth (an integer))\n"
        "    deps(//a,  -1)\n"
        "               ^"
    )


def test_empty_expression() -> None:
    with pytest.raises(KilnError) as raised:
        parse("  ")
    assert raised.value.format() == "empty query expression\n  hint: try: kiln query //..."


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("//a +", "unexpected end of expression", 5),
        ("//a - -//b", "unexpected '-'", 6),
        ("(//a", "unexpected end of expression", 4),
        ("//a)", "unexpected ')'", 3),
        ("deps()", "unexpected ')'", 5),
        ("deps(//a, -1)", "unexpected '-' (expected a depth (an integer))", 10),
        ("deps(//a, x)", "unexpected 'x' (expected a depth (an integer))", 10),
        ("deps(//a,)", "unexpected ')' (expected a depth (an integer))", 9),
        ("deps(//a, 1, 2)", "unexpected ',' (expected ')')", 11),
        ("deps(//a 1)", "unexpected '1' (expected ')')", 9),
        ("rdeps(//a)", "unexpected ')' (rdeps() takes 2 arguments)", 9),
        ("kind(//a)", "unexpected ')' (kind() takes 2 arguments)", 8),
        ("set(deps(//a))", "unexpected '(' (set() takes target patterns only)", 8),
        ("* + //a", "unexpected character '*'", 0),
        ("//a +   *", "unexpected character '*'", 8),
        ("//a + 'b", "unterminated quotation '", 6),
        (
            "dpes(//a)",
            "unknown query function 'dpes' (known: allpaths, attr, deps, filter, kind, labels, "
            "rdeps, somepath, tests)",
            0,
        ),
    ],
)
def test_syntax_error_points_at_the_problem(text: str, message: str, column: int) -> None:
    with pytest.raises(KilnError) as raised:
        parse(text)
    assert raised.value.format() == (
        f"syntax error in query expression: {message}\n    {text}\n    {' ' * column}^"
    )
