"""Printing query results: label, build, json and graph (Graphviz DOT), as Bazel does."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kiln.errors import Location
from kiln.loading.package import Target
from kiln.query.engine import kind_description

FORMATS = ("label", "label_kind", "build", "json", "graph")


def render(
    fmt: str,
    labels: list[str],
    target: Callable[[str], Target],
    locate: Callable[[Target], Location],
) -> str:
    if fmt == "label":
        return "".join(f"{label}\n" for label in labels)
    if fmt == "label_kind":
        return "".join(f"{kind_description(target(label))} {label}\n" for label in labels)
    if fmt == "build":
        return "".join(_build(target(label), locate) for label in labels)
    if fmt == "json":
        return json.dumps([_json(target(label)) for label in labels], indent=2) + "\n"
    return _graph(labels, target)


def _build(target: Target, locate: Callable[[Target], Location]) -> str:
    location = locate(target)
    if not target.is_rule:
        return f"# {location}\n# {target.kind} {target.label}\n\n"
    package = target.package
    lines = [f"# {location}", f"{target.kind}("]
    for name, value in target.attrs.items():
        lines.append(f"  {name} = {_starlark(_shorten(value, package))},")
    lines.append(")")
    return "\n".join(lines) + "\n\n"


def _shorten(value: Any, package: str) -> Any:
    """Labels of the target's own package as ':name', the way BUILD files write them."""
    prefix = f"//{package}:"
    if isinstance(value, str) and value.startswith(prefix):
        return ":" + value[len(prefix) :]
    if isinstance(value, list):
        return [_shorten(v, package) for v in value]
    return value


def _starlark(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "None"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_starlark(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_starlark(k)}: {_starlark(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _json(target: Target) -> dict[str, Any]:
    return {
        "label": target.label,
        "kind": kind_description(target),
        "attrs": target.attrs,
        "deps": list(target.deps),
    }


def _graph(labels: list[str], target: Callable[[str], Target]) -> str:
    selected = set(labels)
    lines = ["digraph mygraph {", "  node [shape=box];"]
    for label in labels:
        lines.append(f'  "{label}"')
        for dep in target(label).deps:
            if dep in selected:
                lines.append(f'  "{label}" -> "{dep}"')
    lines.append("}")
    return "\n".join(lines) + "\n"
