"""What a rule is: a name, an attribute schema and an implementation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kiln.rule_api.attrs import RuleAttrs


@dataclass(frozen=True)
class Rule:
    """A rule of the catalogue in rules/.

    `impl` turns a target's attributes and its dependencies' providers into
    providers and actions; it is None for rules that only shape the graph.
    """

    name: str
    attrs: type[RuleAttrs]
    doc: str
    impl: Callable[..., Any] | None = None
