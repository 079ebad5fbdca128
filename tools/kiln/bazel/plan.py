"""KilnPlan: the planning action of every Bazel target of kiln's rules.

    python -m kiln.bazel.plan bazel-out/k8-fastbuild/bin/models/mlp_pt2.kiln_target.json

It is kiln's analysis of one target, run by Bazel as an action (cheap, no
torch): for the target and every kiln target it depends on, bottom up, the
rule's pydantic schema validates the attributes exactly as kiln's loader
does (the same message), and the rule's implementation runs in a RuleContext
whose outputs lie under Bazel's output root. Then, for the target itself:

  - the action graph it recorded must be the one Bazel declared (its
    Starlark came from rules/private/catalogue.bzl; a difference means that
    file is stale), else one error saying how to regenerate it;
  - its FileWrite actions are carried out: the specs and generated sources,
    byte for byte what `kiln build` writes;
  - <name>.kiln_plan.json records the graph (what kiln would run).

Errors print as kiln prints them (`ERROR: <label>: <message>` and a hint),
with exit code 1 and no traceback; Bazel shows them under the failed action.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kiln.action_graph import PYTHON_INTERPRETER, Action, File
from kiln.action_specs import SpecError
from kiln.bazel.request import BazelPlan, PlannedAction, PlannedGraph, PlanReport, PlanTarget
from kiln.errors import KilnError
from kiln.host_facts import HostFacts, ToolchainResolver
from kiln.loading import attr_errors
from kiln.rule_api import AnalyzedTarget, DefaultInfo, RuleContext
from kiln.rule_api.attrs import LABEL
from kiln.rules import load_rule, source_of

PYTHON = "{python}"  # the interpreter in a PlannedAction's argv
REGENERATE = "python -m kiln.bazel.generate"


class PlanError(KilnError):
    pass


def analyze(plan: BazelPlan, host: HostFacts) -> tuple[RuleContext[Any], DefaultInfo]:
    """kiln's analysis of plan.label and the kiln targets below it, under Bazel's roots."""
    toolchains = ToolchainResolver(host)
    analyzed: dict[str, AnalyzedTarget] = {}
    ctx: RuleContext[Any] | None = None
    info: DefaultInfo | None = None
    for label in _bottom_up(plan):
        target = plan.targets[label]
        ctx = _context(label, target, analyzed, toolchains)
        assert ctx.rule.impl is not None, f"{target.kind} has no implementation"
        providers: dict[type, Any] = {type(p): p for p in ctx.rule.impl(ctx)}
        analyzed[label] = AnalyzedTarget(label, providers)
        info = providers[DefaultInfo]
    assert ctx is not None and info is not None
    return ctx, info


def _context(
    label: str,
    target: PlanTarget,
    analyzed: dict[str, AnalyzedTarget],
    toolchains: ToolchainResolver,
) -> RuleContext[Any]:
    rule = load_rule(target.kind)
    try:
        attrs = rule.attrs.model_validate(target.attrs)
    except ValidationError as error:
        message, hint = attr_errors.describe(error, rule.attrs, rule.name)
        raise PlanError(message, label=label, hint=hint) from None
    deps: dict[str, AnalyzedTarget] = {}
    for dep in _labels(target):
        if dep in analyzed:
            deps[dep] = analyzed[dep]
        else:  # a source file or another rule's output: its files, as Bazel found them
            files = tuple(File(path) for path in target.files.get(dep, ()))
            deps[dep] = AnalyzedTarget(dep, {DefaultInfo: DefaultInfo(files)})
    # The context's label is package-relative (//pkg:name): the repository of a target
    # in another one is in its output root (external/<repo>), as kiln.bazel.paths says.
    return RuleContext(
        rule,
        f"//{target.package}:{target.name}",
        attrs,
        deps,
        toolchains,
        output_root=target.output_root,
    )


def _labels(target: PlanTarget) -> Iterator[str]:
    rule = load_rule(target.kind)
    for field in rule.attrs.fields_marked(LABEL):
        info = rule.attrs.model_fields[field]
        value = target.attrs.get(info.alias or field)
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            yield from (v for v in value if isinstance(v, str))


def _bottom_up(plan: BazelPlan) -> list[str]:
    """plan.label and the kiln targets it depends on, dependencies first."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(label: str) -> None:
        if label in seen:
            return
        seen.add(label)
        for dep in _labels(plan.targets[label]):
            if dep in plan.targets:
                visit(dep)
        order.append(label)

    if plan.label not in plan.targets:
        raise SpecError(f"the plan of {plan.label} does not hold that target")
    visit(plan.label)
    return order


def planned_graph(actions: list[Action], info: DefaultInfo) -> PlannedGraph:
    """The graph of a target as the plan compares it: paths, argv with `{python}` for the
    symbolic interpreter (PYTHON_INTERPRETER) of Python actions."""
    writes: list[str] = []
    planned: list[PlannedAction] = []
    for action in actions:
        if action.content is not None:
            writes += [f.path for f in action.outputs]
            continue
        argv = [
            PYTHON if i == 0 and a == PYTHON_INTERPRETER else a for i, a in enumerate(action.argv)
        ]
        planned.append(
            PlannedAction(
                mnemonic=action.mnemonic,
                argv=tuple(argv),
                inputs=tuple(sorted({f.path for f in action.inputs})),
                outputs=tuple(sorted({f.path for f in action.outputs})),
                # by name, as kiln_rule.bzl sorts them
                python_env=tuple(f"{p.name}=={p.version}" for p in sorted(action.python_env or ())),
            )
        )
    return PlannedGraph(
        writes=tuple(sorted(writes)),
        actions=tuple(planned),
        files=tuple(sorted({f.path for f in info.files})),
    )


def check(plan: BazelPlan, found: PlannedGraph, kind: str) -> None:
    """The graph kiln's rule planned must be the one Bazel declared."""
    if plan.expected == found:
        return
    where = f"rules/private/catalogue.bzl is out of date with {source_of(kind)}"
    if plan.expected is None:
        message = (
            f"Bazel's {kind} rule has no action graph for these attributes, and kiln's "
            f"rule plans one: {where}"
        )
    else:
        message = f"kiln's {kind} rule plans other actions than Bazel declared: {where}"
    raise PlanError(
        message,
        label=plan.label,
        hint=f"regenerate it with `{REGENERATE}` in the kiln repository, and rebuild",
        details=_difference(plan.expected, found),
    )


def _difference(expected: PlannedGraph | None, found: PlannedGraph) -> str:
    lines = ["declared by Bazel:", expected.model_dump_json(indent=2) if expected else "nothing"]
    lines += ["planned by kiln:", found.model_dump_json(indent=2)]
    return "\n".join(lines)


def write_outputs(actions: list[Action]) -> None:
    """The FileWrite actions: specs and generated sources, at their execroot paths."""
    for action in actions:
        if action.content is None:
            continue
        path = Path(action.primary_output.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(action.content)
        if action.is_executable:
            path.chmod(0o755)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write(f"usage: python -m kiln.bazel.plan TARGET.json (got {argv})\n")
        return 2
    try:
        plan = BazelPlan.read(argv[0])
        host = HostFacts.of_this_machine()
        ctx, info = analyze(plan, host)
        actions = ctx.actions.declared
        graph = planned_graph(actions, info)
        check(plan, graph, ctx.rule.name)
        write_outputs(actions)
        report = PlanReport(label=plan.label, graph=graph)
        Path(plan.report).write_text(report.to_json(), encoding="utf-8")
    except SpecError as error:
        sys.stderr.write(f"ERROR: {error}\n")
        return 1
    except KilnError as error:
        # A stale catalogue shows both graphs; anything else is the user's to fix, as in kiln.
        sys.stderr.write(f"ERROR: {error.format(verbose=isinstance(error, PlanError))}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
