"""Evaluating query expressions over the target graph.

A value is an ordered set of labels (a dict used as one). Target patterns
load packages through the PackageLoader; functions that walk edges first
build the graph of their argument's closure, which also checks it.
"""

from __future__ import annotations

from collections.abc import Iterable

from kiln.errors import KilnError
from kiln.label import TargetPattern
from kiln.loading import patterns
from kiln.loading.graph import GraphBuilder
from kiln.loading.loader import PackageLoader
from kiln.loading.package import Target
from kiln.query import safe_regex
from kiln.query.parser import Binary, Call, Expr, SetOf, Word
from kiln.query.safe_regex import Regex

Result = dict[str, None]


class QueryError(KilnError):
    pass


class QueryEngine:
    def __init__(self, loader: PackageLoader, working_package: str):
        self.loader = loader
        self.working_package = working_package
        self.graph = GraphBuilder(loader, check_visibility=False)  # as Bazel's query
        self.targets: dict[str, Target] = {}

    def evaluate(self, expr: Expr) -> Result:
        if isinstance(expr, Word):
            return self.pattern(expr.text)
        if isinstance(expr, SetOf):
            result: Result = {}
            for word in expr.words:
                result.update(self.pattern(word))
            return result
        if isinstance(expr, Binary):
            return self._chain(expr)
        return self.call(expr)

    def _chain(self, expr: Binary) -> Result:
        """`a + b - c ^ ...`, left to right in a loop: the parser leans such a chain
        to the left, as deep as it is long (a generated union of thousands of labels)."""
        rights: list[tuple[str, Expr]] = []
        left: Expr = expr
        while isinstance(left, Binary):
            rights.append((left.op, left.right))
            left = left.left
        result = dict(self.evaluate(left))
        for op, operand in reversed(rights):
            right = self.evaluate(operand)
            if op == "+":
                result.update(right)
            elif op == "-":
                result = {label: None for label in result if label not in right}
            else:
                result = {label: None for label in result if label in right}
        return result

    def target(self, label: str) -> Target:
        return self.targets[label]

    def pattern(self, text: str) -> Result:
        parsed = TargetPattern.parse(text, self.working_package)
        if parsed.negative:
            raise QueryError(f"'{text}': negative patterns are written 'X - Y' in queries")
        labels = patterns.expand(self.loader, [parsed])
        self._close(labels)
        return dict.fromkeys(labels)

    def _close(self, labels: Iterable[str]) -> None:
        """Load and check the transitive closure of `labels`; remember its targets."""
        missing = [label for label in labels if label not in self.targets]
        if missing:
            self.targets.update(self.graph.build(missing).targets)

    # -- functions -----------------------------------------------------------

    def call(self, call: Call) -> Result:
        handler = getattr(self, f"_fn_{call.function}")
        result: Result = handler(*call.args)
        return result

    def _fn_deps(self, expr: Expr, depth: int | None = None) -> Result:
        return self._walk(self.evaluate(expr), depth, lambda t: self.target(t).deps)

    def _fn_rdeps(self, universe: Expr, expr: Expr, depth: int | None = None) -> Result:
        scope = self._fn_deps(universe)
        reverse: dict[str, list[str]] = {label: [] for label in scope}
        for label in scope:
            for dep in self.target(label).deps:
                if dep in reverse:
                    reverse[dep].append(label)
        start = {label: None for label in self.evaluate(expr) if label in scope}
        return self._walk(start, depth, lambda label: reverse[label])

    @staticmethod
    def _walk(start: Result, depth: int | None, edges: object) -> Result:
        assert callable(edges)
        seen: Result = dict(start)
        frontier = list(start)
        level = 0
        while frontier and (depth is None or level < depth):
            level += 1
            nxt: list[str] = []
            for label in frontier:
                for other in edges(label):
                    if other not in seen:
                        seen[other] = None
                        nxt.append(other)
            frontier = nxt
        return seen

    def _fn_kind(self, pattern: str, expr: Expr) -> Result:
        regex = self._regex(pattern)
        return {
            label: None
            for label in self.evaluate(expr)
            if regex.search(kind_description(self.target(label)))
        }

    def _fn_filter(self, pattern: str, expr: Expr) -> Result:
        regex = self._regex(pattern)
        return {label: None for label in self.evaluate(expr) if regex.search(label)}

    def _fn_attr(self, name: str, pattern: str, expr: Expr) -> Result:
        regex = self._regex(pattern)
        result: Result = {}
        for label in self.evaluate(expr):
            target = self.target(label)
            if name in target.attrs and regex.search(attr_string(target.attrs[name])):
                result[label] = None
        return result

    def _fn_labels(self, name: str, expr: Expr) -> Result:
        result: Result = {}
        for label in self.evaluate(expr):
            value = self.target(label).attrs.get(name)
            values = value if isinstance(value, list) else [value] if value else []
            labels = [v for v in values if isinstance(v, str) and v.startswith("//")]
            self._close(labels)
            result.update(dict.fromkeys(labels))
        return result

    def _fn_tests(self, expr: Expr) -> Result:
        return {
            label: None
            for label in self.evaluate(expr)
            if self.target(label).kind.endswith("_test")
        }

    def _fn_somepath(self, start: Expr, end: Expr) -> Result:
        return self._paths(start, end, first_only=True)

    def _fn_allpaths(self, start: Expr, end: Expr) -> Result:
        return self._paths(start, end, first_only=False)

    def _paths(self, start_expr: Expr, end_expr: Expr, *, first_only: bool) -> Result:
        starts = self.evaluate(start_expr)
        ends = self.evaluate(end_expr)
        universe = self._fn_deps(start_expr)
        # Nodes that reach an end, computed backwards over the universe.
        reverse: dict[str, list[str]] = {label: [] for label in universe}
        for label in universe:
            for dep in self.target(label).deps:
                reverse[dep].append(label)
        reaches = self._walk({e: None for e in ends if e in universe}, None, reverse.__getitem__)
        if not first_only:
            forward = self._walk(dict(starts), None, lambda t: self.target(t).deps)
            return {label: None for label in forward if label in reaches}
        for start in starts:
            if start not in reaches:
                continue
            path = [start]
            while path[-1] not in ends:
                path.append(next(d for d in self.target(path[-1]).deps if d in reaches))
            return dict.fromkeys(path)
        return {}

    @staticmethod
    def _regex(pattern: str) -> Regex:
        return safe_regex.compile(pattern)


def kind_description(target: Target) -> str:
    """How Bazel names a target's kind: 'genrule rule', 'source file', 'generated file'."""
    return f"{target.kind} rule" if target.is_rule else target.kind


def attr_string(value: object) -> str:
    """An attribute value as attr() matches it: lists as '[a, b]', booleans as 0/1."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return "[" + ", ".join(attr_string(v) for v in value) + "]"
    if value is None:
        return ""
    return str(value)
