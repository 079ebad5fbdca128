"""What a rule is: a name, an attribute schema, the toolchains it reads, an implementation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kiln.host_facts import Toolchain
from kiln.rule_api.attrs import RuleAttrs


@dataclass(frozen=True)
class Rule:
    """A rule of the catalogue in rules/.

    `impl(ctx)` turns a target's attributes and its dependencies' providers into
    providers (DefaultInfo among them) and actions; it is None for rules that
    only shape the graph. `toolchains` are the ones `impl` may read through
    `ctx.toolchain(...)`. A `root_package` rule's targets are declared in the root
    BUILD file only (python_requirements: its repository is found there).
    """

    name: str
    attrs: type[RuleAttrs]
    doc: str
    impl: Callable[..., list[object]] | None = None
    toolchains: tuple[Toolchain[Any], ...] = ()
    root_package: bool = False
    # For kiln.bazel.explore: attribute -> the rule of the target it names in an example
    # ("source" for a plain file). Where left out, explore tries every rule of the
    # catalogue in turn: fine for one or two label attributes, too many for six.
    example_deps: tuple[tuple[str, str], ...] = ()
