"""The record a Bazel target hands its planning action: `<name>.kiln_target.json`.

Written by rules/private/kiln_rule.bzl with json.encode at Bazel's analysis
time, read here as a typed Spec (so a mismatch between the two sides is one
clear message, not a KeyError): the target and every kiln target it depends
on, each with its attributes exactly as the BUILD file gave them (labels
made canonical by Bazel), and the action graph Bazel declared for it, which
the planner compares with the one kiln's rule plans.
"""

from __future__ import annotations

from pydantic import JsonValue

from kiln.action_specs import Record, Spec


class PlanTarget(Record):
    """One kiln target as Bazel analyzed it."""

    kind: str  # the rule: "aoti_package"
    package: str  # "models"
    name: str  # "mlp_pt2"
    output_root: str  # bazel-out/k8-fastbuild/bin (+ /external/<repo>): kiln.bazel.paths
    attrs: dict[str, JsonValue]  # as written, label attributes as canonical labels
    # label -> its files, for every label this target names that is no kiln target
    # (source files, other rules' outputs): what kiln's analysis would have found.
    files: dict[str, tuple[str, ...]]


class PlannedAction(Record):
    """An action as both sides see it: its command line (the interpreter written
    `{python}`), declared inputs and outputs, all execroot-relative paths."""

    mnemonic: str
    argv: tuple[str, ...]
    inputs: tuple[str, ...]  # sorted; Bazel adds kiln's code and the toolchain's files
    outputs: tuple[str, ...]  # sorted
    # The locked packages it runs with ("timm==1.0.31", sorted): the closure of the
    # target's @pip// deps (Bazel adds their files to the inputs, their sites to PYTHONPATH).
    python_env: tuple[str, ...]


class PlannedGraph(Record):
    """A target's action graph: the files the planner writes, the actions that run after
    it, and the files the target stands for (DefaultInfo)."""

    writes: tuple[str, ...]  # sorted
    actions: tuple[PlannedAction, ...]  # in declaration order
    files: tuple[str, ...]  # sorted


class BazelPlan(Spec):
    """What `python -m kiln.bazel.plan` reads."""

    label: str  # the target to plan
    targets: dict[str, PlanTarget]  # it and every kiln target it depends on, by label
    # The graph Bazel declared; None where rules/private/catalogue.bzl has no shape
    # for these attributes (invalid ones, or a stale catalogue).
    expected: PlannedGraph | None
    report: str  # where to write what kiln planned: <name>.kiln_plan.json


class PlanReport(Spec):
    """<name>.kiln_plan.json: the actions kiln's rule planned for the target."""

    label: str
    graph: PlannedGraph
