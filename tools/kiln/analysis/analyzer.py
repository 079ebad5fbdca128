"""Analysis: running rule implementations over the target graph.

Targets are analyzed dependencies first. Each rule implementation receives a
RuleContext and returns providers; the actions it declared join the action
graph. Source files become File providers; a generated file is the output of
the rule that declares it. No torch import happens here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kiln.action_graph import GENERATED_ROOT, Action, File
from kiln.errors import KilnError, Location
from kiln.host_facts import ToolchainResolver
from kiln.loading.graph import TargetGraph
from kiln.loading.package import GENERATED_FILE, SOURCE_FILE, Target
from kiln.rule_api.context import AnalysisError, RuleContext
from kiln.rule_api.providers import AnalyzedTarget, DefaultInfo
from kiln.rule_api.rule import Rule


@dataclass
class ActionGraph:
    targets: dict[str, AnalyzedTarget]
    actions: list[Action]
    producer: dict[str, Action]  # output path -> the action that writes it


class Analyzer:
    def __init__(
        self,
        graph: TargetGraph,
        load_rule: Callable[[str], Rule],
        locate: Callable[[Target], Location],
        toolchains: ToolchainResolver,
    ):
        self.graph = graph
        self.load_rule = load_rule
        self.locate = locate
        self.toolchains = toolchains
        self.analyzed: dict[str, AnalyzedTarget] = {}
        self.actions: list[Action] = []
        self.producer: dict[str, Action] = {}
        self._inside: dict[str, str] = {}  # each directory above an output -> one such output

    def analyze(self, labels: list[str]) -> ActionGraph:
        for label in labels:
            self._analyze_closure(label)
        return ActionGraph(self.analyzed, self.actions, self.producer)

    def _analyze_closure(self, root: str) -> None:
        # Iterative post-order: a target is analyzed once all its deps are.
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            label, expanded = stack.pop()
            if label in self.analyzed:
                continue
            target = self.graph.targets[label]
            if expanded:
                self.analyzed[label] = self._analyze(target)
                continue
            stack.append((label, True))
            stack.extend((dep, False) for dep in target.deps if dep not in self.analyzed)

    def _analyze(self, target: Target) -> AnalyzedTarget:
        if target.kind == SOURCE_FILE:
            package, name = target.package, target.name
            path = f"{package}/{name}" if package else name
            return AnalyzedTarget(target.label, {DefaultInfo: DefaultInfo((File(path),))})
        if target.kind == GENERATED_FILE:
            rule_label = target.deps[0]
            path = f"{GENERATED_ROOT}/{target.package}/{target.name}".replace("//", "/")
            if path not in self.producer:
                raise self._error(
                    self.graph.targets[rule_label],
                    f"declares output '{target.name}' but no action of it produces it",
                )
            return AnalyzedTarget(target.label, {DefaultInfo: DefaultInfo((File(path),))})
        return self._analyze_rule(target)

    def _analyze_rule(self, target: Target) -> AnalyzedTarget:
        rule = self.load_rule(target.kind)
        if rule.impl is None:
            raise self._error(target, f"{rule.name}() targets cannot be built yet")
        try:
            attrs = rule.attrs.model_validate(target.attrs)
        except ValidationError as error:  # the loader validated already: a kiln bug
            raise AssertionError(f"{target.label}: {error}") from error
        deps = {dep: self.analyzed[dep] for dep in target.deps}
        ctx: RuleContext[Any] = RuleContext(rule, target.label, attrs, deps, self.toolchains)
        try:
            returned = rule.impl(ctx)
        except KilnError as error:  # AnalysisError, or a LabelError (a bad $(location x))
            if error.location is None:
                error.location = self.locate(target)
            if error.label is None:
                error.label = target.label
            raise
        providers = {type(p): p for p in returned}
        if DefaultInfo not in providers:
            raise AssertionError(f"rule {rule.name} returned no DefaultInfo")
        for action in ctx.actions.declared:
            for output in action.outputs:
                if output.path in self.producer:
                    raise self._error(
                        target,
                        f"output {output.path} is also produced by "
                        f"{self.producer[output.path].owner}",
                    )
                self._check_nesting(target, output.path)
                self.producer[output.path] = action
            self.actions.append(action)
        return AnalyzedTarget(target.label, providers)

    def _check_nesting(self, target: Target, path: str) -> None:
        """No output may be a directory that another output lies in, across packages too:
        //a's output `b` is kiln-out/a/b, where //a/b's outputs go (loading checks one
        package's outputs among themselves)."""
        parts = path.split("/")
        outer = next(
            (
                "/".join(parts[:i])
                for i in range(1, len(parts))
                if "/".join(parts[:i]) in self.producer
            ),
            None,
        )
        if outer is not None:
            other = self.producer[outer].owner
            raise self._error(
                target,
                f"output {path} lies inside output {outer} of {other}: {outer} cannot be both "
                "a file and a directory",
                hint="rename the output, or the package",
            )
        inner = self._inside.get(path)
        if inner is not None:
            raise self._error(
                target,
                f"output {path} is a directory holding output {inner} of "
                f"{self.producer[inner].owner}: it cannot be both a file and a directory",
                hint="rename the output, or the package",
            )
        for i in range(1, len(parts)):
            self._inside.setdefault("/".join(parts[:i]), path)

    def _error(self, target: Target, message: str, hint: str | None = None) -> KilnError:
        return AnalysisError(message, label=target.label, location=self.locate(target), hint=hint)
