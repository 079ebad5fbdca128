"""Bazel's query language: tokens and expression tree.

    expr := word | '(' expr ')' | set '(' word* ')'
          | name '(' arg (',' arg)* ')'
          | expr ('+' | 'union' | '-' | 'except' | '^' | 'intersect') expr

Binary operators are left-associative and of equal precedence, as in
Bazel's QueryParser. Words may be quoted with ' or "; unquoted words are
made of letters, digits and `*/@.-_:$~[]`, and may not start with - or *.

The parser and the evaluator recurse once per level of parentheses and
function calls, so nesting is bounded at MAX_NESTING (a syntax error, not a
RecursionError after some thousand levels); a chain of binary operators is
read, and evaluated, in a loop, however long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiln.errors import KilnError


class QuerySyntaxError(KilnError):
    pass


@dataclass(frozen=True)
class Word:
    text: str


@dataclass(frozen=True)
class SetOf:
    words: tuple[str, ...]


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Expr | int | str, ...]  # expressions, integers, or regex/attribute words


@dataclass(frozen=True)
class Binary:
    op: str  # '+', '-', '^'
    left: Expr
    right: Expr


Expr = Word | SetOf | Call | Binary

MAX_NESTING = 100

_OPS = {"+": "+", "union": "+", "-": "-", "except": "-", "^": "^", "intersect": "^"}
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<quoted>"[^"]*"|'[^']*')
      | (?P<punct>[(),+^])
      | (?P<word>[A-Za-z0-9/@._:$~\[\]][A-Za-z0-9*/@.\-_:$~\[\]]*)
      | (?P<minus>-)
    )""",
    re.VERBOSE,
)

# name -> kinds of the arguments: 'e' expression, 'w' word, 'i' optional integer
FUNCTIONS: dict[str, str] = {
    "deps": "ei",
    "rdeps": "eei",
    "kind": "we",
    "attr": "wwe",
    "filter": "we",
    "labels": "we",
    "tests": "e",
    "somepath": "ee",
    "allpaths": "ee",
}


@dataclass(frozen=True)
class _Tok:
    kind: str  # 'word', 'quoted', or the punctuation itself
    text: str
    pos: int


def tokenize(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            bad = len(text) - len(text[pos:].lstrip())  # the character, past any blanks
            if text[bad] in "'\"":
                raise _error(text, bad, f"unterminated quotation {text[bad]}")
            raise _error(text, bad, f"unexpected character '{text[bad]}'")
        start = m.start(m.lastgroup or 0)
        if m.group("quoted"):
            tokens.append(_Tok("quoted", m.group("quoted")[1:-1], start))
        elif m.group("punct"):
            tokens.append(_Tok(m.group("punct"), m.group("punct"), start))
        elif m.group("minus"):
            tokens.append(_Tok("-", "-", start))
        else:
            tokens.append(_Tok("word", m.group("word"), start))
        pos = m.end()
    return tokens


def parse(text: str) -> Expr:
    return _Parser(text).parse()


def _error(text: str, pos: int, message: str) -> QuerySyntaxError:
    shown = re.sub(r"\s", " ", text)  # one line, so that the caret lines up
    pointer = " " * pos + "^"
    return QuerySyntaxError(
        f"syntax error in query expression: {message}\n    {shown}\n    {pointer}"
    )


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.nesting = 0  # parentheses and calls open at the current token

    def parse(self) -> Expr:
        if not self.tokens:
            raise QuerySyntaxError("empty query expression", hint="try: kiln query //...")
        expr = self.expression()
        if self.i < len(self.tokens):
            raise self.unexpected()
        return expr

    def peek(self) -> _Tok | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str | None = None) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise _error(self.text, len(self.text), "unexpected end of expression")
        if kind is not None and tok.kind != kind:
            raise self.unexpected(f"expected '{kind}'")
        self.i += 1
        return tok

    def unexpected(self, expected: str = "") -> QuerySyntaxError:
        tok = self.peek()
        if tok is None:
            return _error(self.text, len(self.text), "unexpected end of expression")
        suffix = f" ({expected})" if expected else ""
        return _error(self.text, tok.pos, f"unexpected '{tok.text}'{suffix}")

    def expression(self) -> Expr:
        left = self.primary()
        while True:
            tok = self.peek()
            if tok is None:
                return left
            op = _OPS.get(tok.text) if tok.kind in ("word", "+", "-", "^") else None
            if op is None:
                return left
            self.i += 1
            left = Binary(op, left, self.primary())

    def primary(self) -> Expr:
        tok = self.take()
        if tok.kind == "(":
            self.enter(tok)
            expr = self.expression()
            self.take(")")
            self.nesting -= 1
            return expr
        if tok.kind == "quoted":
            return Word(tok.text)
        if tok.kind != "word":
            self.i -= 1
            raise self.unexpected()
        nxt = self.peek()
        if tok.text == "set" and nxt is not None and nxt.kind == "(":
            self.i += 1
            words: list[str] = []
            while (tok2 := self.take()).kind != ")":
                if tok2.kind not in ("word", "quoted"):
                    self.i -= 1
                    raise self.unexpected("set() takes target patterns only")
                words.append(tok2.text)
            return SetOf(tuple(words))
        if nxt is not None and nxt.kind == "(":
            self.enter(tok)
            call = self.call(tok)
            self.nesting -= 1
            return call
        return Word(tok.text)

    def enter(self, tok: _Tok) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise _error(
                self.text,
                tok.pos,
                f"expression nested more than {MAX_NESTING} levels deep "
                "(parentheses and function calls)",
            )

    def call(self, name: _Tok) -> Call:
        signature = FUNCTIONS.get(name.text)
        if signature is None:
            raise _error(
                self.text,
                name.pos,
                f"unknown query function '{name.text}' (known: {', '.join(sorted(FUNCTIONS))})",
            )
        self.take("(")
        args: list[Expr | int | str] = []
        for n, kind in enumerate(signature):
            if n:
                tok = self.peek()
                if tok is not None and tok.kind == ",":
                    self.i += 1
                elif kind == "i":
                    break
                else:
                    raise self.unexpected(
                        f"{name.text}() takes {len(signature.rstrip('i'))} arguments"
                    )
            if kind == "e":
                args.append(self.expression())
            elif kind == "w":
                args.append(self.take_word())
            else:
                tok = self.take()
                if tok.kind != "word" or not tok.text.isdigit():
                    self.i -= 1
                    raise self.unexpected("expected a depth (an integer)")
                args.append(int(tok.text))
        self.take(")")
        return Call(name.text, tuple(args))

    def take_word(self) -> str:
        tok = self.take()
        if tok.kind not in ("word", "quoted"):
            self.i -= 1
            raise self.unexpected("expected a word")
        return tok.text
